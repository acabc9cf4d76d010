"""Tools deduplicated through a dict keyed by name, built from the caller's list."""
from openai import OpenAI

client = OpenAI()


def run(tool_specs: list[dict], prompt: str):
    unique = {spec["function"]["name"]: spec for spec in tool_specs}
    return client.chat.completions.create(
        model="gpt-4o",
        tools=list(unique.values()),  # expect: PC006
        messages=[{"role": "user", "content": prompt}],
    )
