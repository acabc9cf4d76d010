"""The question is sent before the (static) system message."""
from openai import OpenAI

client = OpenAI()
SYSTEM_PROMPT = "You are a legal research assistant. Cite statutes and say when law varies by state."


def research(question: str):
    return client.chat.completions.create(
        model="gpt-4o",
        messages=[
            {"role": "user", "content": question},  # expect: PC004
            {"role": "system", "content": SYSTEM_PROMPT},
        ],
    )
