"""Canonical JSON (sorted keys, compact separators) for a schema in the instructions."""
import json

from openai import OpenAI

from .schema import output_schema

client = OpenAI()


def extract(text: str):
    schema = json.dumps(output_schema(), sort_keys=True, separators=(",", ":"))
    return client.responses.create(model="gpt-4.1-mini", instructions=f"Return JSON matching {schema}",
                                   input=text)
