"""Issue 28: not reported -- json.dumps of a dict whose key order the code that builds it fixes
(a parameter, a literal, a schema) gives the same text for equal data. A ReAct-style agent lists the tool schemas as JSON text inside the system prompt."""
import json

import anthropic

client = anthropic.Anthropic()


def react_system(tools: list[dict]) -> str:
    schemas = "\n".join(json.dumps(t["input_schema"]) for t in tools)
    return "You can call these tools. Reply with a JSON object naming one.\n" + schemas


def step(tools: list[dict], history: list[dict]):
    return client.messages.create(model="claude-sonnet-4-5", max_tokens=1024,
                                  system=react_system(tools), messages=history)
