"""A context message inserted right after the system prompt, with a retrieval timestamp."""
import time

from openai import OpenAI

client = OpenAI()
SYSTEM = "You answer questions about the company wiki."


def answer(history: list[dict], question: str, ctx: str):
    messages = [{"role": "system", "content": SYSTEM}, *history]
    messages.insert(1, {"role": "user", "content": f"Context retrieved at {time.ctime()}:\n{ctx}"})  # expect: PC001
    messages.append({"role": "user", "content": question})
    return client.chat.completions.create(model="gpt-4o", messages=messages)
