"""The cache TTL is chosen by time of day; the prompt text itself is static."""
from datetime import datetime
from pathlib import Path

import anthropic

client = anthropic.Anthropic()
MANUAL = Path("manual.md").read_text()


def ask(question: str):
    ttl = "1h" if datetime.now().hour < 8 else "5m"
    return client.messages.create(
        model="claude-sonnet-4-5", max_tokens=800,
        system=[{"type": "text", "text": MANUAL, "cache_control": {"type": "ephemeral", "ttl": ttl}}],
        messages=[{"role": "user", "content": question}],
    )
