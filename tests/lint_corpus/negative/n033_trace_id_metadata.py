"""A trace id travels in headers and metadata, not in the prompt."""
import uuid

from openai import OpenAI

client = OpenAI()
INSTRUCTIONS = "Extract the invoice number, total and due date as JSON."


def extract(invoice_text: str):
    trace_id = uuid.uuid4().hex
    return client.responses.create(
        model="gpt-4.1-mini",
        instructions=INSTRUCTIONS,
        input=invoice_text,
        metadata={"trace_id": trace_id},
        extra_headers={"X-Trace-Id": trace_id},
    )
