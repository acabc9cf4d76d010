"""Responses API instructions that start with the per-request language."""
from openai import OpenAI

client = OpenAI()
STYLE_GUIDE = (
    "Write in plain language, short sentences, active voice. Use headings for sections, "
    "never more than five bullets per list, and end with a one-line summary."
)


def draft(lang: str, brief: str):
    return client.responses.create(
        model="gpt-4.1",
        instructions=f"Reply in {lang}.\n" + STYLE_GUIDE,  # expect: PC004
        input=brief,
    )
