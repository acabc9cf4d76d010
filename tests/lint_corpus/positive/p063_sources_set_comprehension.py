"""The list of source names is built with a set comprehension and joined into the system prompt."""
from openai import OpenAI

client = OpenAI()


def answer(docs: list, question: str) -> str:
    sources = ", ".join({doc.metadata["source"] for doc in docs})  # expect: PC003
    context = "\n\n".join(doc.page_content for doc in docs)
    completion = client.chat.completions.create(model="gpt-4o-mini", messages=[
        {"role": "system", "content": f"Answer only from these sources: {sources}."},
        {"role": "user", "content": f"{context}\n\nQuestion: {question}"},
    ])
    return completion.choices[0].message.content
