"""A module-level template filled with the clock before each request."""
from datetime import datetime, timezone

import anthropic

SYSTEM_TEMPLATE = (
    "You are the assistant for {product}. The current UTC time is {now}.\n"
    "Use the knowledge base below and say when you do not know."
)
PRODUCT = "Acme Cloud"

client = anthropic.Anthropic()


def chat(history: list[dict], question: str):
    now = datetime.now(timezone.utc)
    system_prompt = SYSTEM_TEMPLATE.format(product=PRODUCT, now=now)  # expect: PC001
    return client.messages.create(
        model="claude-sonnet-4-5",
        max_tokens=1024,
        system=system_prompt,
        messages=[*history, {"role": "user", "content": question}],
    )
