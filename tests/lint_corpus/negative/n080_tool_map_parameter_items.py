"""Issue 28: a dict passed in keeps the order its owner gave it; not reported. Tool specs come in as a mapping argument and are listed in its order."""
from openai import OpenAI

client = OpenAI()


def run_agent(tool_map: dict[str, dict], prompt: str):
    return client.chat.completions.create(
        model="gpt-4o-mini",
        tools=[{"type": "function", "function": spec} for _, spec in tool_map.items()],
        messages=[{"role": "user", "content": prompt}],
    )
