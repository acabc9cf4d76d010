"""A breakpoint on a long literal prefix: well above the minimum."""
import anthropic

client = anthropic.Anthropic()
STYLE_RULES = (
    "Use active voice. Prefer short sentences. Define every acronym on first use. "
    "Put the conclusion first, then the evidence, then open questions. "
) * 60


def edit(draft: str):
    return client.messages.create(
        model="claude-sonnet-4-5",
        max_tokens=2048,
        system=[{"type": "text", "text": STYLE_RULES, "cache_control": {"type": "ephemeral"}}],
        messages=[{"role": "user", "content": draft}],
    )
