"""A fresh UUID as an idempotency header and user id: not part of the prompt."""
import uuid

from anthropic import Anthropic

client = Anthropic()
SYSTEM = "You draft polite replies to customer emails."


def draft(email: str, user_id: str):
    return client.messages.create(
        model="claude-sonnet-4-5",
        max_tokens=500,
        system=SYSTEM,
        messages=[{"role": "user", "content": email}],
        metadata={"user_id": user_id},
        extra_headers={"Idempotency-Key": str(uuid.uuid4())},
    )
