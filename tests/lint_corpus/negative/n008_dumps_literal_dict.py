"""json.dumps of a dict literal: its key order is the source order."""
import json

from anthropic import Anthropic

client = Anthropic()
OUTPUT_FORMAT = {"format": "markdown", "max_words": 200, "sections": ["summary", "risks"]}


def summarize(text: str):
    return client.messages.create(
        model="claude-haiku-4-5",
        max_tokens=400,
        system="Summarize the report. Output settings: " + json.dumps(OUTPUT_FORMAT),
        messages=[{"role": "user", "content": text}],
    )
