"""The first (cached) user turn carries a timestamp; the question comes last."""
import time

from openai import OpenAI

client = OpenAI()
DOCS = "Product FAQ: plans, limits, billing cycles and the refund policy."


def ask(question: str):
    return client.chat.completions.create(
        model="gpt-4o-mini",
        messages=[
            {"role": "system", "content": "Answer from the FAQ only."},
            {"role": "user", "content": f"FAQ snapshot taken at {time.time()}:\n{DOCS}"},  # expect: PC001
            {"role": "assistant", "content": "Understood, I will answer from the FAQ."},
            {"role": "user", "content": question},
        ],
    )
