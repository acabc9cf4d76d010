"""A small provider stand-in for the proxy tests: OpenAI chat and Anthropic Messages shapes,
plain and streamed, with faults on request (header ``x-fault``).

Usage in responses is what the request asks for in ``x-test-usage`` (JSON: ``prompt``,
``cached``, ``write``, ``output``), so each test states its own numbers. Every request seen
is kept in ``UpstreamApp.seen`` (method, path with query, headers, body bytes) so tests can
compare what arrived with what the client sent.

Faults: ``reset`` (headers and two SSE events, then the connection is dropped),
``529`` (Anthropic's documented overloaded_error body), ``hang`` (no response until the
caller disconnects, counted in ``cancelled``, or 30 s),
``slow`` (SSE events 50 ms apart); on ``/echo``: ``gzip`` (a gzip-encoded body), ``set-cookie``
(a ``Set-Cookie`` header). Error bodies follow the providers' documented shapes
(Anthropic "Errors", OpenAI "Error codes"; checked 2026-12-03).
"""

from __future__ import annotations

import asyncio
import gzip
import json
import threading
import time
from typing import Any

import uvicorn


def _usage(headers: dict[str, str]) -> dict[str, int]:
    u = json.loads(headers.get("x-test-usage", "{}") or "{}")
    return {
        k: int(u.get(k, d))
        for k, d in (("prompt", 100), ("cached", 0), ("write", 0), ("output", 5))
    }


class Cut(Exception):
    """Raised mid-response: uvicorn drops the connection."""


class UpstreamApp:
    def __init__(self) -> None:
        self.seen: list[dict[str, Any]] = []
        self.cancelled = 0
        self.finished = 0

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while True:
                m = await receive()
                if m["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                else:
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        body = b""
        while True:
            m = await receive()
            body += m.get("body", b"")
            if not m.get("more_body"):
                break
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        path = scope["path"]
        qs = scope.get("query_string", b"").decode()
        self.seen.append(
            {
                "method": scope["method"],
                "path": path + ("?" + qs if qs else ""),
                "headers": list(scope["headers"]),
                "body": body,
            }
        )
        if headers.get("x-fault") == "hang":  # answer nothing; see the caller go away
            try:
                m = await asyncio.wait_for(receive(), 30)
            except asyncio.TimeoutError:
                m = {}
            if m.get("type") == "http.disconnect":
                self.cancelled += 1
                return
        try:
            await self._respond(path, headers, body, send)
            self.finished += 1
        except asyncio.CancelledError:
            self.cancelled += 1
            raise

    async def _respond(self, path: str, headers: dict[str, str], body: bytes, send: Any) -> None:
        fault = headers.get("x-fault", "")
        if path == "/echo":
            doc = json.dumps({"len": len(body)}).encode()
            extra = [(b"x-upstream-thing", b"a"), (b"x-upstream-thing", b"b")]
            if fault == "gzip":  # the body as a server compressing its responses sends it
                doc = gzip.compress(doc, mtime=0)
                extra.append((b"content-encoding", b"gzip"))
            if fault == "set-cookie":  # e.g. a CDN's bot-management cookie
                extra.append((b"set-cookie", b"s=1; Path=/"))
            await _send(send, 200, doc, "application/json", extra=extra)
            return
        if fault == "529":
            err = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
            await _send(send, 529, json.dumps(err).encode(), "application/json")
            return
        if fault == "hang":
            await asyncio.sleep(30)
            await _send(send, 200, b"{}", "application/json")
            return
        ctype = headers.get("content-type", "")
        if not ctype.startswith("application/json"):
            err = {
                "error": {
                    "message": "Unsupported content type",
                    "type": "invalid_request_error",
                    "param": None,
                    "code": None,
                }
            }
            await _send(send, 415, json.dumps(err).encode(), "application/json")
            return
        try:
            req = json.loads(body)
            if not isinstance(req, dict):
                raise ValueError("not an object")
        except ValueError as e:
            if path.endswith("/messages"):
                err = {
                    "type": "error",
                    "error": {
                        "type": "invalid_request_error",
                        "message": f"invalid JSON body: {e}",
                    },
                }
            else:
                err = {
                    "error": {
                        "message": f"We could not parse the JSON body: {e}",
                        "type": "invalid_request_error",
                        "param": None,
                        "code": None,
                    }
                }
            await _send(send, 400, json.dumps(err).encode(), "application/json")
            return
        u = _usage(headers)
        if path.endswith("/chat/completions"):
            await self._chat(req, u, fault, send)
        elif path.endswith("/messages"):
            await self._messages(req, u, fault, send)
        else:
            await _send(
                send,
                404,
                b'{"error":{"message":"not found","type":"invalid_request_error"}}',
                "application/json",
            )

    async def _chat(self, req: dict, u: dict[str, int], fault: str, send: Any) -> None:
        usage = {
            "prompt_tokens": u["prompt"],
            "completion_tokens": u["output"],
            "total_tokens": u["prompt"] + u["output"],
            "prompt_tokens_details": {"cached_tokens": u["cached"]},
        }
        base = {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "created": 1764000000,
            "model": req.get("model", "gpt-4o"),
        }
        if not req.get("stream"):
            doc = {
                **base,
                "choices": [
                    {
                        "index": 0,
                        "finish_reason": "stop",
                        "message": {"role": "assistant", "content": "ok"},
                    }
                ],
                "usage": usage,
            }
            await _send(send, 200, json.dumps(doc).encode(), "application/json")
            return
        events = [
            {
                **base,
                "object": "chat.completion.chunk",
                "choices": [{"index": 0, "delta": {"content": w}, "finish_reason": None}],
            }
            for w in ("o", "k", "!", "?")
        ]
        events.append({**base, "object": "chat.completion.chunk", "choices": [], "usage": usage})
        await self._sse(
            send,
            [f"data: {json.dumps(e)}\n\n".encode() for e in events] + [b"data: [DONE]\n\n"],
            fault,
        )

    async def _messages(self, req: dict, u: dict[str, int], fault: str, send: Any) -> None:
        usage = {
            "input_tokens": u["prompt"] - u["cached"] - u["write"],
            "cache_read_input_tokens": u["cached"],
            "cache_creation_input_tokens": u["write"],
            "output_tokens": u["output"],
        }
        model = req.get("model", "claude-sonnet-4-5")
        if not req.get("stream"):
            doc = {
                "id": "msg_1",
                "type": "message",
                "role": "assistant",
                "model": model,
                "content": [{"type": "text", "text": "ok"}],
                "stop_reason": "end_turn",
                "stop_sequence": None,
                "usage": usage,
            }
            await _send(send, 200, json.dumps(doc).encode(), "application/json")
            return
        evs = [
            (
                "message_start",
                {
                    "type": "message_start",
                    "message": {
                        "id": "msg_1",
                        "type": "message",
                        "role": "assistant",
                        "model": model,
                        "content": [],
                        "stop_reason": None,
                        "stop_sequence": None,
                        "usage": {**usage, "output_tokens": 1},
                    },
                },
            ),
            (
                "content_block_start",
                {
                    "type": "content_block_start",
                    "index": 0,
                    "content_block": {"type": "text", "text": ""},
                },
            ),
        ]
        evs += [
            (
                "content_block_delta",
                {
                    "type": "content_block_delta",
                    "index": 0,
                    "delta": {"type": "text_delta", "text": w},
                },
            )
            for w in ("o", "k")
        ]
        evs += [
            ("content_block_stop", {"type": "content_block_stop", "index": 0}),
            (
                "message_delta",
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                    "usage": {"output_tokens": u["output"]},
                },
            ),
            ("message_stop", {"type": "message_stop"}),
        ]
        await self._sse(
            send, [f"event: {n}\ndata: {json.dumps(d)}\n\n".encode() for n, d in evs], fault
        )

    async def _sse(self, send: Any, chunks: list[bytes], fault: str) -> None:
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [
                    (b"content-type", b"text/event-stream"),
                    (b"cache-control", b"no-cache"),
                    (b"request-id", b"req_test"),
                ],
            }
        )
        for i, c in enumerate(chunks):
            if fault == "reset" and i == 2:
                raise Cut("upstream reset mid-stream (test fault)")
            if fault == "slow" and i:
                await asyncio.sleep(0.05)
            await send({"type": "http.response.body", "body": c, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})


async def _send(send: Any, status: int, body: bytes, ctype: str, extra: list | None = None) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", ctype.encode()),
                (b"content-length", str(len(body)).encode()),
                *(extra or []),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body, "more_body": False})


class Upstream:
    """The app on a free loopback port in a thread (``with Upstream() as up: up.url``)."""

    def __init__(self) -> None:
        self.app = UpstreamApp()
        cfg = uvicorn.Config(
            self.app,
            host="127.0.0.1",
            port=0,
            log_level="critical",
            access_log=False,
            http="h11",
            lifespan="on",
            h11_max_incomplete_event_size=1 << 20,
        )
        self.server = uvicorn.Server(cfg)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> Upstream:
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            assert time.monotonic() < deadline, "fake upstream did not start"
            time.sleep(0.01)
        port = self.server.servers[0].sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.should_exit = True
        self.thread.join(10)
