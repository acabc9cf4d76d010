"""Tools looked up by name in sorted order."""
from openai import OpenAI

from .schemas import SCHEMAS

client = OpenAI()


def run(enabled: set[str], prompt: str):
    return client.chat.completions.create(
        model="gpt-4o",
        tools=[SCHEMAS[name] for name in sorted(enabled)],
        messages=[{"role": "user", "content": prompt}],
    )
