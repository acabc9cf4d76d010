"""Caching a single tiny tool definition: the prefix is a few hundred tokens."""
from anthropic import Anthropic

client = Anthropic()
WEATHER_TOOL = {
    "name": "get_weather",
    "description": "Current weather for a city.",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    "cache_control": {"type": "ephemeral"},  # expect: PC008
}


def ask(question: str):
    return client.messages.create(
        model="claude-sonnet-4-5",
        max_tokens=300,
        tools=[WEATHER_TOOL],
        messages=[{"role": "user", "content": question}],
    )
