"""Issue 28: not reported -- json.dumps of a dict whose key order the code that builds it fixes
(a parameter, a literal, a schema) gives the same text for equal data. orjson without OPT_SORT_KEYS for tenant settings in the system prompt."""
import orjson
from anthropic import Anthropic

client = Anthropic()


def reply(settings: dict, text: str):
    return client.messages.create(
        model="claude-haiku-4-5",
        max_tokens=300,
        system="Tenant settings:\n" + orjson.dumps(settings).decode(),
        messages=[{"role": "user", "content": text}],
    )
