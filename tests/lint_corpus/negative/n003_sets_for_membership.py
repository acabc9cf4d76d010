"""Sets used for membership tests and validation, never iterated into a prompt."""
from openai import OpenAI

client = OpenAI()
ALLOWED_MODELS = {"gpt-4o", "gpt-4o-mini", "gpt-4.1"}
BLOCKED_WORDS = frozenset({"password", "ssn"})
SYSTEM = "You are a writing assistant. Keep the user's tone."


def rewrite(text: str, model: str = "gpt-4o-mini") -> str:
    if model not in ALLOWED_MODELS:
        raise ValueError(f"unsupported model {model!r}; choose one of {sorted(ALLOWED_MODELS)}")
    if any(word in text.lower() for word in BLOCKED_WORDS):
        raise ValueError("text contains sensitive data")
    completion = client.chat.completions.create(
        model=model,
        messages=[{"role": "system", "content": SYSTEM}, {"role": "user", "content": text}],
    )
    return completion.choices[0].message.content
