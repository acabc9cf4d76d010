"""Per-user details come after the static policy, at the end of the system prompt."""
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
        system=f"{POLICY}\n\nThe customer's name is {user.display_name}.",
        messages=history,
    )
