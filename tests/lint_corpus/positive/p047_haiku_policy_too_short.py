"""About 1,500 characters cached on Haiku 3.5, whose minimum is 2,048 tokens."""
import anthropic

client = anthropic.Anthropic()
POLICY = (
    "You triage incoming support email for a payments company. Classify each email as fraud, "
    "chargeback, onboarding, payout delay, API error or other. Extract the merchant id when present. "
    "Reply with JSON only: {\"category\": ..., \"merchant_id\": ..., \"urgency\": 1-3}. "
) * 4


def triage(email_body: str):
    return client.messages.create(
        model="claude-3-5-haiku-20241022",
        max_tokens=200,
        system=[{"type": "text", "text": POLICY, "cache_control": {"type": "ephemeral"}}],  # expect: PC008
        messages=[{"role": "user", "content": email_body}],
    )
