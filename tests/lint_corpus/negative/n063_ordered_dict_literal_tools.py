"""Tools kept in an OrderedDict literal: a fixed order."""
from collections import OrderedDict

from anthropic import Anthropic

client = Anthropic()
TOOLS = OrderedDict([
    ("search", {"name": "search", "description": "Search the docs.", "input_schema": {"type": "object"}}),
    ("fetch", {"name": "fetch", "description": "Fetch a page.", "input_schema": {"type": "object"}}),
])


def run(history: list[dict]):
    return client.messages.create(model="claude-sonnet-4-5", max_tokens=800,
                                  tools=list(TOOLS.values()), messages=history)
