"""OpenTelemetry spans carry request ids; prompts do not."""
import uuid

from opentelemetry import trace
from openai import OpenAI

tracer = trace.get_tracer(__name__)
client = OpenAI()
SYSTEM = "You label product reviews as positive, negative or mixed."


def label(review: str, request_id: str | None = None) -> str:
    request_id = request_id or str(uuid.uuid4())
    with tracer.start_as_current_span("label") as span:
        span.set_attribute("request.id", request_id)
        completion = client.chat.completions.create(
            model="gpt-4o-mini",
            messages=[{"role": "system", "content": SYSTEM}, {"role": "user", "content": review}],
        )
    return completion.choices[0].message.content
