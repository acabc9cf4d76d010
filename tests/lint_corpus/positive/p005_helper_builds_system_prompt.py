"""A helper builds the system prompt with the user's local time."""
from datetime import datetime
from zoneinfo import ZoneInfo

import anthropic

client = anthropic.Anthropic()


def build_system_prompt(user_tz: str) -> str:
    local = datetime.now(ZoneInfo(user_tz))
    return (
        "You are a scheduling assistant. Propose meeting slots during working hours.\n"
        f"The user's local time is {local:%A %H:%M}."  # expect: PC001
    )


def propose_slots(user_tz: str, request_text: str):
    return client.messages.create(
        model="claude-haiku-4-5",
        max_tokens=400,
        system=build_system_prompt(user_tz),
        messages=[{"role": "user", "content": request_text}],
    )
