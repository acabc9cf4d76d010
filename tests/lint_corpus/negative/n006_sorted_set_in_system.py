"""A set of tags, sorted before it is joined into the system prompt."""
from openai import OpenAI

client = OpenAI()
TAGS = {"billing", "shipping", "returns"}


def ask(extra_tags: list[str], question: str):
    tags = TAGS | set(extra_tags)
    system = "Tag the question with one of: " + ", ".join(sorted(tags))
    return client.chat.completions.create(
        model="gpt-4o-mini",
        messages=[{"role": "system", "content": system}, {"role": "user", "content": question}],
    )
