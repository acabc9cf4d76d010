"""Tool specs come in as a mapping argument and are listed in its order."""
from openai import OpenAI

client = OpenAI()


def run_agent(tool_map: dict[str, dict], prompt: str):
    return client.chat.completions.create(
        model="gpt-4o-mini",
        tools=[{"type": "function", "function": spec} for _, spec in tool_map.items()],  # expect: PC006
        messages=[{"role": "user", "content": prompt}],
    )
