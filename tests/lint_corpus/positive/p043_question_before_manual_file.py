"""The customer's question is glued in front of the whole product manual."""
from pathlib import Path

from openai import OpenAI

client = OpenAI()
MANUAL = (Path(__file__).parent / "manual.md").read_text(encoding="utf-8")


def answer(customer, question: str) -> str:
    prompt = f"Customer {customer.name} asks: {question}\n\n" + MANUAL  # expect: PC007
    response = client.responses.create(model="gpt-4.1-mini", input=prompt)
    return response.output_text
