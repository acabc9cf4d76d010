"""A short system note with the current time appended after the conversation."""
from datetime import datetime, timezone

from openai import OpenAI

client = OpenAI()
SYSTEM = "You are a helpful assistant for a calendar app."


def turn(history: list[dict]):
    messages = [{"role": "system", "content": SYSTEM}, *history]
    messages.append({"role": "system", "content": f"Current UTC time: {datetime.now(timezone.utc):%H:%M}"})
    return client.chat.completions.create(model="gpt-4o", messages=messages)
