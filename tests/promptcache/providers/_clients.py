"""Official clients wired to a recording mock transport (nothing leaves the process)."""

from __future__ import annotations

import json
from typing import Any


class Recorder:
    def __init__(self) -> None:
        self.requests: list[tuple[str, dict[str, str], bytes]] = []

    @property
    def json(self) -> Any:
        return json.loads(self.requests[-1][2])

    @property
    def body(self) -> bytes:
        return self.requests[-1][2]

    @property
    def headers(self) -> dict[str, str]:
        return self.requests[-1][1]


CHAT_OK = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "created": 0,
    "model": "m",
    "choices": [
        {"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}
    ],
    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
}
RESPONSES_OK = {
    "id": "resp_1",
    "object": "response",
    "created_at": 0,
    "model": "m",
    "output": [],
    "status": "completed",
    "parallel_tool_calls": True,
    "tool_choice": "auto",
    "tools": [],
}
MESSAGE_OK = {
    "id": "msg_1",
    "type": "message",
    "role": "assistant",
    "model": "m",
    "content": [{"type": "text", "text": "ok"}],
    "stop_reason": "end_turn",
    "stop_sequence": None,
    "usage": {"input_tokens": 1, "output_tokens": 1},
}


def openai_client(rec: Recorder):
    import httpx
    import openai

    def handler(request: httpx.Request) -> httpx.Response:
        rec.requests.append((str(request.url), dict(request.headers), request.content))
        body = RESPONSES_OK if request.url.path.endswith("/responses") else CHAT_OK
        return httpx.Response(200, json=body)

    return openai.OpenAI(
        api_key="x",
        base_url="http://mock/v1",
        max_retries=0,
        http_client=httpx.Client(transport=httpx.MockTransport(handler)),
    )


def anthropic_client(rec: Recorder, reply: Any = None):
    import anthropic
    import httpx2  # the anthropic client of this environment is built on httpx2

    def handler(request: httpx2.Request) -> httpx2.Response:
        rec.requests.append((str(request.url), dict(request.headers), request.content))
        return httpx2.Response(200, json=reply or MESSAGE_OK)

    return anthropic.Anthropic(
        api_key="x",
        max_retries=0,
        http_client=httpx2.Client(transport=httpx2.MockTransport(handler)),
    )
