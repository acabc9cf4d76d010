"""A tool enum built from a set of categories."""
from anthropic import Anthropic

client = Anthropic()


def classify_ticket(categories: list[str], ticket: str):
    tools = [{
        "name": "set_category",
        "description": "Assign the ticket to a category.",
        "input_schema": {
            "type": "object",
            "properties": {"category": {"type": "string", "enum": list(set(categories))}},  # expect: PC003
            "required": ["category"],
        },
    }]
    return client.messages.create(model="claude-haiku-4-5", max_tokens=200, tools=tools,
                                  messages=[{"role": "user", "content": ticket}])
