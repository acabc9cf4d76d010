"""time.strftime with an explicit, fixed time tuple is deterministic."""
import time

from openai import OpenAI

client = OpenAI()
RELEASE = time.strptime("2025-03-01", "%Y-%m-%d")
SYSTEM = f"You document the product released on {time.strftime('%B %Y', RELEASE)}."


def ask(question: str):
    return client.chat.completions.create(
        model="gpt-4o-mini",
        messages=[{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}],
    )
