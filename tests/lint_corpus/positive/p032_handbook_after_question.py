"""RAG done backwards: the employee handbook follows the per-request question."""
from pathlib import Path

from anthropic import Anthropic

client = Anthropic()
HANDBOOK = Path("handbook.md").read_text()


def ask_hr(question: str):
    return client.messages.create(
        model="claude-sonnet-4-5",
        max_tokens=900,
        system="Answer HR questions using the handbook.",
        messages=[
            {"role": "user", "content": f"Question: {question}"},  # expect: PC004
            {"role": "user", "content": HANDBOOK},
        ],
    )
