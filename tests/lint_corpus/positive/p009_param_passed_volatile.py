"""The volatile value is made by the caller and passed into a message builder."""
from datetime import datetime

from openai import OpenAI

client = OpenAI()


def make_messages(system_text: str, question: str) -> list[dict]:
    return [
        {"role": "system", "content": system_text},
        {"role": "user", "content": question},
    ]


def handle(question: str):
    messages = make_messages(f"You are a helpful analyst. Data as of {datetime.utcnow()}.", question)  # expect: PC001
    return client.chat.completions.create(model="gpt-4o-mini", messages=messages)
