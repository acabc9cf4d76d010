"""OpenAI Responses API call that tags the instructions with a fresh request id."""
import uuid

from openai import OpenAI

client = OpenAI()


def summarize(document: str) -> str:
    request_id = str(uuid.uuid4())
    response = client.responses.create(
        model="gpt-4.1",
        instructions=f"Request {request_id}. Summarize the document in five bullet points.",  # expect: PC001
        input=document,
    )
    return response.output_text
