"""Request parameters assembled as a dict and splatted into the call."""
from datetime import datetime

import anthropic

client = anthropic.Anthropic()


def ask(question: str):
    params = {
        "model": "claude-sonnet-4-5",
        "max_tokens": 1024,
        "system": f"You are a helpful assistant. The time is {datetime.now():%H:%M}.",  # expect: PC001
        "messages": [{"role": "user", "content": question}],
    }
    return client.messages.create(**params)
