"""Tool schemas rendered into the system prompt with sorted keys."""
import json

import anthropic

client = anthropic.Anthropic()


def react_system(tools: list[dict]) -> str:
    schemas = "\n".join(json.dumps(t["input_schema"], sort_keys=True) for t in tools)
    return "You can call these tools. Reply with a JSON object naming one.\n" + schemas


def step(tools: list[dict], history: list[dict]):
    return client.messages.create(model="claude-sonnet-4-5", max_tokens=1024,
                                  system=react_system(tools), messages=history)
