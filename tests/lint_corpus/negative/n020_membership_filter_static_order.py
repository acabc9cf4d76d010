"""Tools filtered by a set of enabled names while iterating a static list."""
from anthropic import Anthropic

client = Anthropic()
ALL_TOOLS = [
    {"name": "search", "description": "Search the web.", "input_schema": {"type": "object"}},
    {"name": "calculator", "description": "Evaluate arithmetic.", "input_schema": {"type": "object"}},
    {"name": "weather", "description": "Current weather.", "input_schema": {"type": "object"}},
]


def run(enabled: set[str], prompt: str):
    tools = [tool for tool in ALL_TOOLS if tool["name"] in enabled]
    return client.messages.create(model="claude-sonnet-4-5", max_tokens=1024, tools=tools,
                                  messages=[{"role": "user", "content": prompt}])
