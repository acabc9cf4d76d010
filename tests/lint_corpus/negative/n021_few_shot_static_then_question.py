"""Static few-shot examples first, the per-request text last."""
from openai import OpenAI

client = OpenAI()
FEW_SHOT = [
    {"role": "user", "content": "The package arrived broken."},
    {"role": "assistant", "content": "complaint"},
    {"role": "user", "content": "How do I reset my password?"},
    {"role": "assistant", "content": "question"},
]


def classify(text: str) -> str:
    messages = [{"role": "system", "content": "Label each message."}, *FEW_SHOT,
                {"role": "user", "content": text}]
    completion = client.chat.completions.create(model="gpt-4o-mini", messages=messages)
    return completion.choices[0].message.content
