"""A .format template whose first field is the customer's name."""
from openai import OpenAI

client = OpenAI()
SYSTEM_TEMPLATE = """Customer: {customer}

You are a senior support engineer for a hosting company. Diagnose DNS, TLS and email
deliverability problems step by step and ask for logs before guessing."""


def troubleshoot(customer_name: str, problem: str):
    system = SYSTEM_TEMPLATE.format(customer=customer_name)  # expect: PC004
    return client.chat.completions.create(
        model="gpt-4o",
        messages=[{"role": "system", "content": system}, {"role": "user", "content": problem}],
    )
