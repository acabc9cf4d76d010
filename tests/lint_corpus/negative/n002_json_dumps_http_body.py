"""json.dumps serializes the HTTP body: key order of the body does not matter."""
import json
import os

import requests
from anthropic import Anthropic  # noqa: F401  (typed client used elsewhere)

API_URL = "https://api.anthropic.com/v1/messages"
SYSTEM = "Summarize support tickets in three bullet points."


def summarize(ticket: dict) -> str:
    payload = {
        "model": "claude-haiku-4-5",
        "max_tokens": 300,
        "system": SYSTEM,
        "messages": [{"role": "user", "content": ticket["body"]}],
    }
    response = requests.post(
        API_URL,
        data=json.dumps(payload),
        headers={"x-api-key": os.environ["ANTHROPIC_API_KEY"], "anthropic-version": "2023-06-01",
                 "content-type": "application/json"},
        timeout=30,
    )
    response.raise_for_status()
    return response.json()["content"][0]["text"]
