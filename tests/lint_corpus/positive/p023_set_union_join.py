"""Allowed actions computed as a set union and joined into the system prompt."""
from anthropic import Anthropic

client = Anthropic()
BASE_PERMISSIONS = {"read_docs", "search"}


def agent_turn(user_permissions: list[str], history: list[dict]):
    allowed = set(user_permissions) | BASE_PERMISSIONS
    system = "You are an operations agent.\nAllowed actions: " + ", ".join(allowed)  # expect: PC003
    return client.messages.create(model="claude-sonnet-4-5", max_tokens=1024, system=system,
                                  messages=history)
