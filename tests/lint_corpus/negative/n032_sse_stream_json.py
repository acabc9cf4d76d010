"""FastAPI streaming endpoint: json.dumps frames server-sent events."""
import json

from fastapi import FastAPI
from fastapi.responses import StreamingResponse
from anthropic import Anthropic

app = FastAPI()
client = Anthropic()
SYSTEM = "You are a concise assistant."


@app.get("/stream")
def stream(q: str):
    def events():
        with client.messages.stream(model="claude-sonnet-4-5", max_tokens=500, system=SYSTEM,
                                    messages=[{"role": "user", "content": q}]) as s:
            for text in s.text_stream:
                yield f"data: {json.dumps({'delta': text})}\n\n"
        yield "data: [DONE]\n\n"
    return StreamingResponse(events(), media_type="text/event-stream")
