"""A module-level set of topics listed in the system prompt."""
from openai import OpenAI

client = OpenAI()
TOPICS = {"billing", "shipping", "returns", "warranty"}
SYSTEM_PROMPT = "You only discuss these topics: " + ", ".join(TOPICS) + ".\nRefuse anything else politely."  # expect: PC003


def ask(question: str):
    return client.chat.completions.create(
        model="gpt-4o-mini",
        messages=[{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": question}],
    )
