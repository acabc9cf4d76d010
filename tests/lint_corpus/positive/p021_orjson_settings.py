"""orjson without OPT_SORT_KEYS for tenant settings in the system prompt."""
import orjson
from anthropic import Anthropic

client = Anthropic()


def reply(settings: dict, text: str):
    return client.messages.create(
        model="claude-haiku-4-5",
        max_tokens=300,
        system="Tenant settings:\n" + orjson.dumps(settings).decode(),  # expect: PC002
        messages=[{"role": "user", "content": text}],
    )
