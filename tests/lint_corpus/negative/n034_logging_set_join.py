"""A set joined for a debug log line, not for the prompt."""
import logging

from anthropic import Anthropic

log = logging.getLogger(__name__)
client = Anthropic()
SYSTEM = "Route the request to the right team."


def route(text: str, teams: list[str]):
    unique = set(teams)
    log.debug("candidate teams: %s", ", ".join(unique))
    return client.messages.create(model="claude-haiku-4-5", max_tokens=50, system=SYSTEM,
                                  messages=[{"role": "user", "content": text}])
