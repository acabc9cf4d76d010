"""The user's name opens the system prompt, ahead of a long static policy."""
from anthropic import Anthropic

client = Anthropic()
POLICY = (
    "Follow the refund policy: refunds within 30 days with a receipt, store credit after that. "
    "Never share other customers' data. Escalate chargebacks to billing."
)


def chat(user, history: list[dict]):
    return client.messages.create(
        model="claude-sonnet-4-5",
        max_tokens=700,
        system=f"You are talking to {user.display_name}. " + POLICY,  # expect: PC004
        messages=history,
    )
