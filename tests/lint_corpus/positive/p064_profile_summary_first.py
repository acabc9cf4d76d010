"""A per-user profile summary opens the system prompt, before the shared instructions."""
from anthropic import Anthropic

client = Anthropic()
BASE_INSTRUCTIONS = (
    "You are a fitness coach. Build weekly plans with warm-ups, progressive overload and rest days. "
    "Never give medical advice; refer injuries to a physiotherapist."
)


def summarize(user) -> str:
    return f"{user.name}, {user.age}, goal: {user.goal}"


def plan(user, request_text: str):
    profile = summarize(user)
    return client.messages.create(
        model="claude-sonnet-4-5", max_tokens=1500,
        system=profile + "\n\n" + BASE_INSTRUCTIONS,  # expect: PC004
        messages=[{"role": "user", "content": request_text}],
    )
