"""Tool list built by iterating a set of enabled tool names from the environment."""
import os

from anthropic import Anthropic

from .schemas import TOOL_SCHEMAS

client = Anthropic()


def run(prompt: str):
    enabled = {name.strip() for name in os.environ.get("ENABLED_TOOLS", "search,calc").split(",")}
    return client.messages.create(
        model="claude-sonnet-4-5",
        max_tokens=1024,
        tools=[TOOL_SCHEMAS[name] for name in enabled],  # expect: PC003
        messages=[{"role": "user", "content": prompt}],
    )
