"""A random file name for an upload; the request prompt is static."""
import uuid

from openai import OpenAI

client = OpenAI()
INSTRUCTIONS = "Summarize the attached PDF in five bullets."


def summarize(pdf_bytes: bytes) -> str:
    uploaded = client.files.create(file=(f"{uuid.uuid4()}.pdf", pdf_bytes), purpose="user_data")
    response = client.responses.create(
        model="gpt-4.1-mini",
        instructions=INSTRUCTIONS,
        input=[{"role": "user", "content": [{"type": "input_file", "file_id": uploaded.id}]}],
    )
    return response.output_text
