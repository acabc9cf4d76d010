"""Five cache_control breakpoints in one request (the API allows four)."""
from pathlib import Path

import anthropic

client = anthropic.Anthropic()
GUIDE = Path("guide.md").read_text()
FAQ = Path("faq.md").read_text()
GLOSSARY = Path("glossary.md").read_text()
EXAMPLES = Path("examples.md").read_text()
CHANGELOG = Path("changelog.md").read_text()


def ask(question: str):
    return client.messages.create(
        model="claude-sonnet-4-5",
        max_tokens=1024,
        system=[
            {"type": "text", "text": GUIDE, "cache_control": {"type": "ephemeral"}},
            {"type": "text", "text": FAQ, "cache_control": {"type": "ephemeral"}},
            {"type": "text", "text": GLOSSARY, "cache_control": {"type": "ephemeral"}},
            {"type": "text", "text": EXAMPLES, "cache_control": {"type": "ephemeral"}},
            {"type": "text", "text": CHANGELOG, "cache_control": {"type": "ephemeral"}},  # expect: PC005
        ],
        messages=[{"role": "user", "content": question}],
    )
