"""A customer profile fetched from the CRM is dumped into the system prompt."""
import json

import anthropic

from crm import fetch_profile

client = anthropic.Anthropic()
RULES = "You are a retention specialist. Offer at most one discount per conversation."


def chat(customer_id: str, message: str):
    profile = fetch_profile(customer_id)
    return client.messages.create(
        model="claude-sonnet-4-5",
        max_tokens=600,
        system=f"{RULES}\n\nCustomer profile:\n{json.dumps(profile)}",  # expect: PC002
        messages=[{"role": "user", "content": message}],
    )
