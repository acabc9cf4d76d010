"""A TTL the API does not accept."""
from pathlib import Path

import anthropic

client = anthropic.Anthropic()
MANUAL = Path("manual.md").read_text()
CACHE_10M = {"type": "ephemeral", "ttl": "10m"}


def ask(question: str):
    return client.messages.create(
        model="claude-sonnet-4-5",
        max_tokens=1024,
        system=[{"type": "text", "text": MANUAL, "cache_control": CACHE_10M}],  # expect: PC005
        messages=[{"role": "user", "content": question}],
    )
