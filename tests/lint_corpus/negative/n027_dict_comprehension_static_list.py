"""An index built from a static list keeps the list's order."""
from anthropic import Anthropic

client = Anthropic()
TOOL_LIST = [
    {"name": "create_ticket", "description": "Open a ticket.", "input_schema": {"type": "object"}},
    {"name": "close_ticket", "description": "Close a ticket.", "input_schema": {"type": "object"}},
]
TOOLS_BY_NAME = {tool["name"]: tool for tool in TOOL_LIST}


def run(history: list[dict]):
    return client.messages.create(model="claude-haiku-4-5", max_tokens=500,
                                  tools=list(TOOLS_BY_NAME.values()), messages=history)
