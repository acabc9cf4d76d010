"""1h breakpoints before 5m ones, three in total, on long prefixes: a valid request."""
from pathlib import Path

import anthropic

client = anthropic.Anthropic()
TOOLS = [
    {"name": "search_docs", "description": "Search the documentation.",
     "input_schema": {"type": "object", "properties": {"q": {"type": "string"}}}},
]
GUIDE = Path("guide.md").read_text()
FAQ = Path("faq.md").read_text()


def ask(history: list[dict], question: str):
    return client.messages.create(
        model="claude-sonnet-4-5",
        max_tokens=1024,
        tools=TOOLS,
        system=[
            {"type": "text", "text": GUIDE, "cache_control": {"type": "ephemeral", "ttl": "1h"}},
            {"type": "text", "text": FAQ, "cache_control": {"type": "ephemeral"}},
        ],
        messages=[*history, {"role": "user", "content": [
            {"type": "text", "text": question, "cache_control": {"type": "ephemeral"}}]}],
    )
