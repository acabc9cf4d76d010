"""Few-shot examples picked with a fixed seed: the same examples every time."""
import random

from anthropic import Anthropic

client = Anthropic()
POOL = [f"Example {i}: input -> output" for i in range(100)]
rng = random.Random(1234)
EXAMPLES = rng.sample(POOL, 5)
SYSTEM = "Follow the pattern of the examples.\n" + "\n".join(EXAMPLES)


def run(text: str):
    return client.messages.create(model="claude-haiku-4-5", max_tokens=200, system=SYSTEM,
                                  messages=[{"role": "user", "content": text}])
