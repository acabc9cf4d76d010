"""prompt_cache_key derived from the static prefix."""
import hashlib

from openai import OpenAI

client = OpenAI()
SYSTEM = "You are a SQL assistant for the analytics warehouse. Only emit SELECT statements."


def sql_for(question: str) -> str:
    completion = client.chat.completions.create(
        model="gpt-4o",
        messages=[{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}],
        prompt_cache_key=hashlib.sha256(SYSTEM.encode()).hexdigest()[:16],
    )
    return completion.choices[0].message.content
