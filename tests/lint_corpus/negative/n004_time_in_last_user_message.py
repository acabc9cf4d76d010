"""The time is written into the last user message only: the prefix stays stable."""
from datetime import datetime

from anthropic import Anthropic

client = Anthropic()
SYSTEM = "You are a scheduling assistant. Propose meeting slots during working hours."


def propose(history: list[dict], text: str):
    return client.messages.create(
        model="claude-sonnet-4-5",
        max_tokens=600,
        system=SYSTEM,
        messages=[*history, {"role": "user", "content": f"[{datetime.now():%H:%M}] {text}"}],
    )
