"""Tool names deduplicated with a set and sorted before building the tool list."""
from anthropic import Anthropic

from .schemas import TOOL_SCHEMAS

client = Anthropic()


def run(requested: list[str], prompt: str):
    names = sorted({name.strip().lower() for name in requested})
    return client.messages.create(
        model="claude-sonnet-4-5",
        max_tokens=1024,
        tools=[TOOL_SCHEMAS[name] for name in names],
        messages=[{"role": "user", "content": prompt}],
    )
