"""Tool schema whose description embeds a date computed per request."""
from datetime import date, timedelta

import anthropic

client = anthropic.Anthropic()


def ask_orders(question: str):
    tools = [
        {
            "name": "list_orders",
            "description": f"List the customer's orders placed since {date.today() - timedelta(days=30)}.",  # expect: PC001
            "input_schema": {"type": "object", "properties": {"status": {"type": "string"}}},
        }
    ]
    return client.messages.create(
        model="claude-sonnet-4-5",
        max_tokens=800,
        tools=tools,
        messages=[{"role": "user", "content": question}],
    )
