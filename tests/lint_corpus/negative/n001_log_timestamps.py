"""Timestamps go to the logs; the prompt itself is static."""
import logging
from datetime import datetime

import anthropic

log = logging.getLogger(__name__)
client = anthropic.Anthropic()
SYSTEM_PROMPT = "You are Acme's support agent. Answer billing questions only."


def answer(question: str) -> str:
    started = datetime.now()
    log.info("request started at %s", started.isoformat())
    response = client.messages.create(
        model="claude-sonnet-4-5",
        max_tokens=512,
        system=SYSTEM_PROMPT,
        messages=[{"role": "user", "content": question}],
    )
    log.info("took %.2fs", (datetime.now() - started).total_seconds())
    return response.content[0].text
