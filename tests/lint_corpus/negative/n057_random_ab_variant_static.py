"""An A/B test picks one of two static prompts per user (stable per user id)."""
import hashlib

from anthropic import Anthropic

client = Anthropic()
VARIANTS = ["You are concise.", "You are concise and friendly."]


def ask(user_id: str, question: str):
    bucket = int(hashlib.sha256(user_id.encode()).hexdigest(), 16) % len(VARIANTS)
    return client.messages.create(model="claude-haiku-4-5", max_tokens=300, system=VARIANTS[bucket],
                                  messages=[{"role": "user", "content": question}])
