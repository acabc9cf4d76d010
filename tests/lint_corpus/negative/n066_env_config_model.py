"""Deployment configuration read from the environment, prompt static."""
import os

from anthropic import Anthropic

client = Anthropic()
MODEL = os.environ.get("CLAUDE_MODEL", "claude-sonnet-4-5")
SYSTEM_PROMPT = "You are the release-notes writer. Group changes by component and keep one line each."


def notes(commits: list[str]):
    return client.messages.create(model=MODEL, max_tokens=1200, system=SYSTEM_PROMPT,
                                  messages=[{"role": "user", "content": "\n".join(commits)}])
