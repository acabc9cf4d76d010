"""The long manual comes first and the question last."""
from pathlib import Path

from openai import OpenAI

client = OpenAI()
MANUAL = (Path(__file__).parent / "manual.md").read_text(encoding="utf-8")


def answer(customer, question: str) -> str:
    prompt = MANUAL + f"\n\nCustomer {customer.name} asks: {question}"
    return client.responses.create(model="gpt-4.1-mini", input=prompt).output_text
