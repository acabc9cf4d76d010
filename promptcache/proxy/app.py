"""The proxy's ASGI app: pass each request upstream and its response back, unchanged.

For every HTTP request outside ``/_promptcache``: the body is read, sent to the upstream with
the same method, path, query and headers (hop-by-hop aside, :mod:`~.headers`), and the
upstream's status, headers and body bytes are sent back as they arrive (``aiter_raw``: no
decoding, no re-chunking of SSE; each chunk is sent as soon as it is read). The recorder sees
the same bytes on the side (:mod:`~.recording`).

Failures reach the client as the upstream made them: a 4xx/5xx is passed through like any
response; a reset mid-body closes the client's connection mid-body (so the client sees the
same truncated stream); a client that disconnects (or times out) cancels the upstream call.
A pooled connection the upstream closed while idle is retried once on a fresh connection.
Only when no upstream response exists at all (connection refused, DNS failure, timeout before
the status line) does the proxy answer itself: 502/504 with the error body shape of the API
that was called (Anthropic, OpenAI or Gemini), the header ``x-promptcache-proxy-error: 1`` and
a message naming the upstream host only (never the query string, which may carry a key).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass, field
from typing import Any

import httpx

from promptcache.proxy.headers import install_log_redaction, request_headers, response_headers
from promptcache.proxy.upstreams import Upstream

__all__ = ["ProxyApp", "ProxyStats", "LIVE_PREFIX", "error_body"]

log = logging.getLogger("promptcache.proxy")

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

#: Upstream connection pools the proxy spreads its requests over.
POOLS = 8
#: The live view's path on the proxy (never forwarded upstream).
LIVE_PREFIX = "/_promptcache"


@dataclass
class ProxyStats:
    """Counters of the proxy's traffic (read by the live view).

    Attributes:
        requests: requests forwarded upstream.
        upstream_unreachable: requests answered by the proxy with 502/504 (no upstream
            response).
        upstream_resets: responses cut by the upstream mid-body (passed on as a cut).
        client_disconnects: calls the client abandoned (the upstream call was cancelled).
    """

    requests: int = 0
    upstream_unreachable: int = 0
    upstream_resets: int = 0
    client_disconnects: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready counters."""
        return {
            "requests": self.requests,
            "upstream_unreachable": self.upstream_unreachable,
            "upstream_resets": self.upstream_resets,
            "client_disconnects": self.client_disconnects,
        }


class _UpstreamCut(Exception):
    """The upstream closed mid-body; raised to the ASGI server so that it drops the client
    connection without completing the response."""


def error_body(path: str, status: int, message: str) -> bytes:
    """The error body the called API would use (Anthropic Messages, Gemini, else OpenAI),
    as documented in each API reference's "Errors" section (checked 2026-12-03)."""
    if path.endswith("/messages") or "/messages/" in path:
        kind = "timeout_error" if status == 504 else "api_error"
        doc: dict[str, Any] = {"type": "error", "error": {"type": kind, "message": message}}
    elif ":generateContent" in path or ":streamGenerateContent" in path:
        state = "DEADLINE_EXCEEDED" if status == 504 else "UNAVAILABLE"
        doc = {"error": {"code": status, "message": message, "status": state}}
    else:
        doc = {"error": {"message": message, "type": "upstream_error", "param": None, "code": None}}
    return json.dumps(doc).encode()


class ProxyApp:
    """ASGI app forwarding to ``upstream`` and feeding ``recorder``.

    Args:
        upstream: where requests go.
        recorder: a :class:`promptcache.integrations.clients._Recorder` (``on_request`` /
            ``on_response``); None records nothing.
        live: the ASGI app served under :data:`LIVE_PREFIX` (the live view), or None (404).
        connect_timeout_s: seconds to connect to the upstream. Reads and writes have no
            proxy timeout: the client's own timeout governs (its disconnect cancels the call).
        transport: an httpx async transport (tests inject faults); default a pooled one.
    """

    def __init__(
        self,
        upstream: Upstream,
        recorder: Any = None,
        *,
        live: ASGIApp | None = None,
        connect_timeout_s: float = 10.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.upstream = upstream
        self.recorder = recorder
        self.live = live
        self.stats = ProxyStats()
        self.connect_timeout_s = connect_timeout_s
        self._transport = transport
        self._clients: list[httpx.AsyncClient] = []
        self._turn = 0
        install_log_redaction()

    # -- ASGI -------------------------------------------------------------------------

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "lifespan":
            await self._lifespan(receive, send)
            return
        if kind != "http":
            return  # websockets are not proxied
        path = scope["path"]
        if path == LIVE_PREFIX or path.startswith(LIVE_PREFIX + "/"):
            await self._serve_live(scope, receive, send)
            return
        await self._forward(scope, receive, send)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                self.client()
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.aclose()
                await send({"type": "lifespan.shutdown.complete"})
                return

    def client(self) -> httpx.AsyncClient:
        """An upstream client: one of :data:`POOLS` pooled clients, taken in turn (httpcore
        scans every connection of a pool on each request, so small pools cost less CPU per
        request at high concurrency than one large pool)."""
        if not self._clients:
            timeout = httpx.Timeout(None, connect=self.connect_timeout_s)
            # idle connections are dropped after 4 s: before a 5 s keep-alive server (uvicorn's
            # and many others' default) closes them under a request being sent
            limits = httpx.Limits(
                max_connections=None, max_keepalive_connections=64, keepalive_expiry=4.0
            )
            self._clients = [
                httpx.AsyncClient(
                    timeout=timeout,
                    limits=limits,
                    transport=self._transport,
                    follow_redirects=False,
                )
                for _ in range(1 if self._transport is not None else POOLS)
            ]
        self._turn = (self._turn + 1) % len(self._clients)
        return self._clients[self._turn]

    async def aclose(self) -> None:
        """Close the upstream connection pools."""
        clients, self._clients = self._clients, []
        for c in clients:
            await c.aclose()

    async def _serve_live(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.live is None:
            await _plain(send, 404, b"no live view on this proxy\n")
            return
        if scope["path"] == LIVE_PREFIX:  # the page's relative URLs need the slash
            await send(
                {
                    "type": "http.response.start",
                    "status": 307,
                    "headers": [(b"location", (LIVE_PREFIX + "/").encode())],
                }
            )
            await send({"type": "http.response.body", "body": b"", "more_body": False})
            return
        sub = dict(scope)
        sub["root_path"] = scope.get("root_path", "") + LIVE_PREFIX
        await self.live(sub, receive, send)

    # -- forwarding ---------------------------------------------------------------------

    async def _forward(self, scope: Scope, receive: Receive, send: Send) -> None:
        body = bytearray()
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body += message.get("body", b"")
            if not message.get("more_body", False):
                break
        raw_path = scope.get("raw_path") or scope["path"].encode("utf-8")
        request = httpx.Request(
            scope["method"],
            self.upstream.url_for(raw_path, scope.get("query_string", b"")),
            headers=request_headers(scope["headers"]),
            content=bytes(body),
        )
        self.stats.requests += 1
        if self.recorder is not None:
            self.recorder.on_request(request)
        relay = asyncio.ensure_future(self._relay(request, scope["path"], send))
        watch = asyncio.ensure_future(_disconnected(receive))
        done, _ = await asyncio.wait({relay, watch}, return_when=asyncio.FIRST_COMPLETED)
        if relay in done:
            watch.cancel()
            relay.result()  # re-raises _UpstreamCut: the server drops the connection
            return
        self.stats.client_disconnects += 1
        relay.cancel()
        try:
            await relay
        except (asyncio.CancelledError, _UpstreamCut, httpx.HTTPError):
            pass

    async def _send(self, request: httpx.Request) -> httpx.Response:
        """Send upstream; a connection the upstream closed while it sat idle in the pool (the
        keep-alive race: closed before a byte of the response) is retried once on a fresh
        one, as the official SDKs would retry it."""
        try:
            return await self.client().send(request, stream=True)
        except (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError):
            self.stats.extra["stale_retries"] = self.stats.extra.get("stale_retries", 0) + 1
            return await self.client().send(request, stream=True)

    async def _relay(self, request: httpx.Request, path: str, send: Send) -> None:
        try:
            response = await self._send(request)
        except httpx.TimeoutException as e:
            self.stats.upstream_unreachable += 1
            await self._unreachable(send, path, 504, e)
            return
        except httpx.HTTPError as e:
            self.stats.upstream_unreachable += 1
            await self._unreachable(send, path, 502, e)
            return
        try:
            if self.recorder is not None:
                self.recorder.on_response(response)
            await send(
                {
                    "type": "http.response.start",
                    "status": response.status_code,
                    "headers": response_headers(response.headers.raw),
                }
            )
            try:
                async for chunk in response.aiter_raw():
                    if chunk:
                        await send({"type": "http.response.body", "body": chunk, "more_body": True})
            except httpx.HTTPError as e:
                self.stats.upstream_resets += 1
                log.info(
                    "promptcache proxy: upstream %s cut a response mid-body (%s)",
                    self.upstream.host,
                    type(e).__name__,
                )
                raise _UpstreamCut(type(e).__name__) from None
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            await response.aclose()

    async def _unreachable(self, send: Send, path: str, status: int, e: Exception) -> None:
        what = "timed out" if status == 504 else "unreachable"
        message = (
            f"promptcache proxy: upstream {self.upstream.host} {what} ({type(e).__name__}); "
            "no response was received"
        )
        log.warning("%s", message)
        body = error_body(path, status, message)
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                    (b"x-promptcache-proxy-error", b"1"),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body, "more_body": False})


async def _disconnected(receive: Receive) -> None:
    """Return when the client disconnects."""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return


async def _plain(send: Send, status: int, text: bytes) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"text/plain; charset=utf-8")],
        }
    )
    await send({"type": "http.response.body", "body": text, "more_body": False})
