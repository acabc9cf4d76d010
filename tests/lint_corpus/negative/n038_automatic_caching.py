"""Anthropic automatic caching with one top-level cache_control."""
from pathlib import Path

import anthropic

client = anthropic.Anthropic()
SYSTEM = Path("prompts/system.md").read_text()


def chat(history: list[dict]):
    return client.messages.create(
        model="claude-sonnet-4-5",
        max_tokens=1024,
        system=SYSTEM,
        messages=history,
        cache_control={"type": "ephemeral"},
    )
