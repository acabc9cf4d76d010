"""Few-shot examples sampled with a fixed seed: the same examples on every run."""
import random

from openai import OpenAI

client = OpenAI()
POOL = ["Q: Is 17 prime? A: yes", "Q: Is 21 prime? A: no", "Q: Is 2 prime? A: yes", "Q: Is 1 prime? A: no"]


def get_shots(k: int = 3, seed: int = 23333) -> list[str]:
    random.seed(seed)
    return random.sample(POOL, k)


def ask(question: str) -> str:
    system = "Answer like the examples.\n" + "\n".join(get_shots())
    completion = client.chat.completions.create(
        model="gpt-4o-mini",
        messages=[{"role": "system", "content": system}, {"role": "user", "content": question}],
    )
    return completion.choices[0].message.content
