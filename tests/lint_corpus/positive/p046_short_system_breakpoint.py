"""A cache breakpoint on a one-line system prompt: far below 1024 tokens."""
import anthropic

client = anthropic.Anthropic()


def chat(history: list[dict]):
    return client.messages.create(
        model="claude-sonnet-4-5",
        max_tokens=1024,
        system=[{
            "type": "text",
            "text": "You are a helpful assistant. Answer briefly.",
            "cache_control": {"type": "ephemeral"},  # expect: PC008
        }],
        messages=history,
    )
