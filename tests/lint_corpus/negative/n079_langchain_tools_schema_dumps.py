"""Issue 28: not reported -- json.dumps of a dict whose key order the code that builds it fixes
(a parameter, a literal, a schema) gives the same text for equal data. Tool descriptions that embed each tool's argument schema as JSON."""
import json

from anthropic import Anthropic

client = Anthropic()


def to_anthropic_tools(lc_tools) -> list[dict]:
    return [
        {
            "name": tool.name,
            "description": tool.description + "\nArguments: " + json.dumps(tool.args),
            "input_schema": {"type": "object"},
        }
        for tool in lc_tools
    ]


def run(lc_tools, history: list[dict]):
    return client.messages.create(model="claude-sonnet-4-5", max_tokens=1024,
                                  tools=to_anthropic_tools(lc_tools), messages=history)
