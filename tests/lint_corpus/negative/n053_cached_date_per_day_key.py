"""The date picks which cached prompt file to load; the prompt text itself is static."""
from datetime import date
from pathlib import Path

from anthropic import Anthropic

client = Anthropic()
PROMPTS = {"weekday": Path("prompts/weekday.md").read_text(), "weekend": Path("prompts/weekend.md").read_text()}


def ask(question: str):
    kind = "weekend" if date.today().weekday() >= 5 else "weekday"
    return client.messages.create(model="claude-sonnet-4-5", max_tokens=500, system=PROMPTS[kind],
                                  messages=[{"role": "user", "content": question}])
