"""Tools chosen per request: the dict's order is the order the client sent."""
from fastapi import FastAPI
from openai import OpenAI
from pydantic import BaseModel

from .registry import TOOL_REGISTRY

app = FastAPI()
client = OpenAI()


class ChatRequest(BaseModel):
    message: str
    tool_names: list[str]


@app.post("/chat")
def chat(request: ChatRequest):
    selected = {name: TOOL_REGISTRY[name] for name in request.tool_names}
    completion = client.chat.completions.create(
        model="gpt-4o",
        tools=list(selected.values()),  # expect: PC006
        messages=[{"role": "user", "content": request.message}],
    )
    return completion.choices[0].message
