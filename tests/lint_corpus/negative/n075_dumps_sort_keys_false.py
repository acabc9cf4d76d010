"""Issue 28: not reported -- json.dumps of a dict whose key order the code that builds it fixes
(a parameter, a literal, a schema) gives the same text for equal data. An explicit sort_keys=False on a schema that goes into the instructions."""
import json

from openai import OpenAI

from .schemas import build_output_schema

client = OpenAI()


def extract(text: str):
    schema = build_output_schema()
    return client.responses.create(
        model="gpt-4.1-mini",
        instructions="Return JSON matching this schema:\n" + json.dumps(schema, sort_keys=False, indent=2),
        input=text,
    )
