"""A dict filled in a loop over a static list: insertion order is fixed."""
from anthropic import Anthropic

client = Anthropic()
BASE_TOOLS = [
    {"name": "lookup_order", "description": "Find an order.", "input_schema": {"type": "object"}},
    {"name": "refund_order", "description": "Refund an order.", "input_schema": {"type": "object"}},
]
INDEX = {}
for tool in BASE_TOOLS:
    INDEX[tool["name"]] = tool


def run(history: list[dict]):
    return client.messages.create(model="claude-sonnet-4-5", max_tokens=1024,
                                  tools=list(INDEX.values()), messages=history)
