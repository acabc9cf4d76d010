"""The static system message is inserted at position 0 of a copied history."""
from openai import OpenAI

client = OpenAI()
SYSTEM = {"role": "system", "content": "You are a careful data analyst. Show your SQL."}


def ask(history: list[dict], question: str):
    messages = list(history)
    messages.insert(0, SYSTEM)
    messages.append({"role": "user", "content": question})
    return client.chat.completions.create(model="gpt-4o", messages=messages)
