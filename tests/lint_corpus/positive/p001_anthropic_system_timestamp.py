"""Support bot: the current time is written into the system prompt on every call."""
from datetime import datetime

import anthropic

client = anthropic.Anthropic()

POLICY = """Answer billing questions only. Never promise refunds above $50.
Escalate legal threats to a human agent. Keep answers under 120 words."""


def answer(question: str) -> str:
    response = client.messages.create(
        model="claude-sonnet-4-5",
        max_tokens=512,
        system=f"You are Acme's support agent. Current time: {datetime.now().isoformat()}\n\n{POLICY}",  # expect: PC001
        messages=[{"role": "user", "content": question}],
    )
    return response.content[0].text
