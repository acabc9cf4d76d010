"""The date flows through a variable into the final user message."""
from datetime import date

from openai import OpenAI

client = OpenAI()
SYSTEM = "You are a personal finance assistant. Never give tax advice."


def ask(history: list[dict], question: str):
    today = date.today().isoformat()
    messages = [{"role": "system", "content": SYSTEM}]
    messages.extend(history)
    messages.append({"role": "user", "content": f"Today is {today}. {question}"})
    return client.chat.completions.create(model="gpt-4o-mini", messages=messages)
