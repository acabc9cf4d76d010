"""A @tool decorator registry: tool order is whatever order registrations ran in."""
from typing import Callable

from anthropic import Anthropic

client = Anthropic()
REGISTRY: dict[str, dict] = {}


def register(name: str, description: str, schema: dict) -> Callable:
    def wrap(fn):
        REGISTRY[name] = {"name": name, "description": description, "input_schema": schema}
        return fn
    return wrap


def run(history: list[dict]):
    return client.messages.create(
        model="claude-sonnet-4-5",
        max_tokens=1024,
        tools=list(REGISTRY.values()),  # expect: PC006
        messages=history,
    )
