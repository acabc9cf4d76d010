"""Three examples sampled per request and written into the system prompt."""
import random

from openai import OpenAI

client = OpenAI()
POOL = [
    "Q: Is 17 prime? A: yes",
    "Q: Is 21 prime? A: no, 3 x 7",
    "Q: Is 2 prime? A: yes, the only even prime",
    "Q: Is 1 prime? A: no, by definition",
]


def ask(question: str) -> str:
    shots = random.sample(POOL, 3)
    system = "Answer like the examples.\n" + "\n".join(shots)  # expect: PC001
    completion = client.chat.completions.create(
        model="gpt-4o-mini",
        messages=[{"role": "system", "content": system}, {"role": "user", "content": question}],
    )
    return completion.choices[0].message.content
