"""A decorator registry, sorted by name before it becomes the tool list."""
from anthropic import Anthropic

client = Anthropic()
REGISTRY: dict[str, dict] = {}


def register(name: str, description: str, schema: dict):
    def wrap(fn):
        REGISTRY[name] = {"name": name, "description": description, "input_schema": schema}
        return fn
    return wrap


def run(history: list[dict]):
    return client.messages.create(
        model="claude-sonnet-4-5",
        max_tokens=1024,
        tools=sorted(REGISTRY.values(), key=lambda tool: tool["name"]),
        messages=history,
    )
