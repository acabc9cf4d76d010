"""Tools listed from a module-level dict literal: its order is the source order."""
from openai import OpenAI

client = OpenAI()
TOOL_SPECS = {
    "search": {"type": "function", "function": {"name": "search", "parameters": {"type": "object"}}},
    "lookup": {"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}},
}


def run(prompt: str):
    return client.chat.completions.create(
        model="gpt-4o",
        tools=list(TOOL_SPECS.values()),
        messages=[{"role": "user", "content": prompt}],
    )
