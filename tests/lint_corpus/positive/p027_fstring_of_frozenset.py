"""A frozenset formatted straight into the instructions."""
from openai import OpenAI

client = OpenAI()
SUPPORTED_LANGUAGES = frozenset(["en", "de", "fr", "es", "it"])


def translate(text: str, target: str):
    return client.responses.create(
        model="gpt-4.1-mini",
        instructions=f"Translate into one of {SUPPORTED_LANGUAGES}. Keep formatting intact.",  # expect: PC003
        input=f"Target: {target}\n\n{text}",
    )
