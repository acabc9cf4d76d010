"""A response cache keyed by a hash of the request, serialized with sorted keys."""
import hashlib
import json

from anthropic import Anthropic

client = Anthropic()
CACHE: dict[str, str] = {}
SYSTEM = "You write short product descriptions."


def describe(product: dict) -> str:
    key = hashlib.sha256(json.dumps(product, sort_keys=True).encode()).hexdigest()
    if key in CACHE:
        return CACHE[key]
    response = client.messages.create(model="claude-haiku-4-5", max_tokens=200, system=SYSTEM,
                                      messages=[{"role": "user", "content": json.dumps(product)}])
    CACHE[key] = response.content[0].text
    return CACHE[key]
