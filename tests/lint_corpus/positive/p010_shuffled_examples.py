"""Few-shot examples shuffled per request "to avoid position bias"."""
import random

import anthropic

client = anthropic.Anthropic()

EXAMPLES = [
    ("The package arrived broken.", "complaint"),
    ("How do I reset my password?", "question"),
    ("Love the new dashboard!", "praise"),
]


def classify(text: str):
    examples = list(EXAMPLES)
    random.shuffle(examples)  # expect: PC001
    shots = "\n".join(f"Text: {t}\nLabel: {label}" for t, label in examples)
    return client.messages.create(
        model="claude-haiku-4-5",
        max_tokens=10,
        system="Classify the text as complaint, question or praise.\n\n" + shots,
        messages=[{"role": "user", "content": text}],
    )
