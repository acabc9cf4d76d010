"""Tools cached for 5 minutes (too few tokens to cache, too), the system prompt after them for an hour."""
from pathlib import Path

from anthropic import Anthropic

client = Anthropic()
LONG_RULES = Path("rules.md").read_text()
TOOLS = [
    {"name": "get_weather", "description": "Weather for a city.",
     "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}},
    {"name": "get_time", "description": "Local time for a city.",
     "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
     "cache_control": {"type": "ephemeral"}},  # expect: PC008
]


def ask(question: str):
    return client.messages.create(
        model="claude-sonnet-4-5",
        max_tokens=512,
        tools=TOOLS,
        system=[{"type": "text", "text": LONG_RULES,
                 "cache_control": {"type": "ephemeral", "ttl": "1h"}}],  # expect: PC005
        messages=[{"role": "user", "content": question}],
    )
