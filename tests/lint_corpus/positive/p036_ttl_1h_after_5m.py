"""A 1h breakpoint on the conversation after a 5m one on the system prompt."""
from pathlib import Path

import anthropic

client = anthropic.Anthropic()
SYSTEM_TEXT = Path("system.md").read_text()
CONTRACT = Path("contract.md").read_text()


def review(question: str):
    return client.messages.create(
        model="claude-sonnet-4-5",
        max_tokens=2048,
        system=[{"type": "text", "text": SYSTEM_TEXT, "cache_control": {"type": "ephemeral"}}],
        messages=[{
            "role": "user",
            "content": [
                {"type": "text", "text": CONTRACT,
                 "cache_control": {"type": "ephemeral", "ttl": "1h"}},  # expect: PC005
                {"type": "text", "text": question},
            ],
        }],
    )
