"""Issue 28: not reported -- json.dumps of a dict whose key order the code that builds it fixes
(a parameter, a literal, a schema) gives the same text for equal data. A customer profile fetched from the CRM is dumped into the system prompt."""
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
        system=f"{RULES}\n\nCustomer profile:\n{json.dumps(profile)}",
        messages=[{"role": "user", "content": message}],
    )
