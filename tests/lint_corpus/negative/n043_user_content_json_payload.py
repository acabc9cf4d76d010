"""A JSON record in the final user message: the uncached tail."""
import json

from openai import OpenAI

client = OpenAI()
SYSTEM = "Check the record for missing or inconsistent fields and list them."


def validate(record: dict) -> str:
    completion = client.chat.completions.create(
        model="gpt-4o-mini",
        messages=[
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": json.dumps(record, indent=2)},
        ],
    )
    return completion.choices[0].message.content
