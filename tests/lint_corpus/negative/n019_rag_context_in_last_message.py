"""Retrieved documents and the question both go into the last user message."""
from openai import OpenAI

from .retrieval import search

client = OpenAI()
SYSTEM = "Answer using only the provided context. Say 'I don't know' otherwise."


def answer(question: str) -> str:
    docs = "\n\n".join(hit.text for hit in search(question, k=5))
    completion = client.chat.completions.create(
        model="gpt-4o-mini",
        messages=[
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": f"Context:\n{docs}\n\nQuestion: {question}"},
        ],
    )
    return completion.choices[0].message.content
