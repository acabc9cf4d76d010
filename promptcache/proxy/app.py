"""The proxy's ASGI app: pass each request upstream and its response back, unchanged.

A plain ASGI callable (no routing framework on the request path). For every HTTP request
outside ``/_promptcache``: the body is read, sent to the upstream with the same method, path,
query and headers (hop-by-hop aside, :mod:`~.headers`) by one shared ``aiohttp`` client
session (its C HTTP parser; no cookie jar, no automatic headers, no decompression, no
redirects), and the upstream's status, headers and body bytes are sent back as they arrive
(``iter_any``: each chunk as soon as it is read, no re-chunking of SSE).

Recording costs the request one ``put`` of the raw exchange (method, path, the session header,
request body, status, three response headers, the body chunks with their arrival times) on
the :class:`Tap`; parsing, usage, the digest chain, attribution and the ledger write happen in
the recorder process (:mod:`~.tap`, :mod:`~.recording`). Only 2xx responses to the API calls
the recorder tracks are tapped (``tracked_api``): it records nothing for others.

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
import time
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol

import aiohttp
from yarl import URL

from promptcache.integrations.clients import tracked_api
from promptcache.proxy.headers import install_log_redaction, request_headers, response_headers
from promptcache.proxy.upstreams import Upstream

__all__ = [
    "ProxyApp",
    "ProxyStats",
    "Exchange",
    "Tap",
    "LIVE_PREFIX",
    "TAPPED_HEADERS",
    "error_body",
]

log = logging.getLogger("promptcache.proxy")

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

#: The live view's path on the proxy (never forwarded upstream).
LIVE_PREFIX = "/_promptcache"
#: The response headers the recorder reads (``_Recorder.on_response``: the body's type and
#: encoding, the local engine's cache note); no other header is handed to it.
TAPPED_HEADERS = frozenset({b"content-type", b"content-encoding", b"x-promptcache-cache-note"})
#: Headers aiohttp would add on its own; the client's request goes out with its own only.
_SKIP_AUTO = frozenset({"User-Agent", "Accept", "Accept-Encoding", "Content-Type"})
#: Largest response head line and field aiohttp accepts from the upstream, bytes (its default
#: 8190 would answer 502 where a client talking to the upstream directly gets a response).
MAX_FIELD_BYTES = 1 << 20
#: The stale keep-alive connection errors retried once (no byte of a response was read).
_STALE = (aiohttp.ServerDisconnectedError, aiohttp.ClientConnectionResetError)


class Exchange(NamedTuple):
    """One proxied 2xx exchange as the recorder gets it (raw; parsed in the recorder process).

    Attributes:
        method: ``POST`` etc.
        raw_path: the request's path, bytes as sent (no query: it may carry a key).
        session: the ``X-Promptcache-Session`` header's value, or None.
        body: the request body, bytes as sent.
        t0: ``time.perf_counter()`` seconds when the request was handed to the upstream.
        status: the upstream's status code (2xx).
        headers: the :data:`TAPPED_HEADERS` of the response, ``(name, value)`` bytes.
        chunks: the response body chunks as passed to the client.
        times: ``time.perf_counter()`` seconds at which each chunk arrived.
        t_end: ``time.perf_counter()`` seconds when the body ended (or was cut).
        ts: wall-clock seconds (``time.time()``) at the end: the record's timestamp.
        complete: False when the upstream cut the body or the client left mid-body.
    """

    method: str
    raw_path: bytes
    session: str | None
    body: bytes
    t0: float
    status: int
    headers: list[tuple[bytes, bytes]]
    chunks: list[bytes]
    times: list[float]
    t_end: float
    ts: float
    complete: bool


class Tap(Protocol):
    """Where the app hands each exchange (:class:`promptcache.proxy.tap.RecorderProcess`)."""

    def put(self, exchange: Exchange) -> None:
        """Take ``exchange``; returns at once and never raises."""


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


class _Watch:
    """Cancels the request's task when its client disconnects, unless the response is
    already being completed."""

    __slots__ = ("task", "finishing", "fired")

    def __init__(self, task: asyncio.Task[Any] | None) -> None:
        self.task = task
        self.finishing = False
        self.fired = False

    async def run(self, receive: Receive) -> None:
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                break
        if not self.finishing and self.task is not None:
            self.fired = True
            self.task.cancel()


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
    """ASGI app forwarding to ``upstream`` and handing each 2xx exchange to ``tap``.

    Args:
        upstream: where requests go.
        tap: the recorder's :class:`Tap`, or None (nothing recorded).
        live: the ASGI app served under :data:`LIVE_PREFIX` (the live view), or None (404).
        connect_timeout_s: seconds to connect to the upstream. Reads and writes have no
            proxy timeout: the client's own timeout governs (its disconnect cancels the call).
    """

    def __init__(
        self,
        upstream: Upstream,
        tap: Tap | None = None,
        *,
        live: ASGIApp | None = None,
        connect_timeout_s: float = 10.0,
    ) -> None:
        self.upstream = upstream
        self.tap = tap
        self.live = live
        self.stats = ProxyStats()
        self.connect_timeout_s = connect_timeout_s
        self._session: aiohttp.ClientSession | None = None
        install_log_redaction()

    # -- ASGI -------------------------------------------------------------------------

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "http":
            path = scope["path"]
            if path.startswith(LIVE_PREFIX) and (
                path == LIVE_PREFIX or path.startswith(LIVE_PREFIX + "/")
            ):
                await self._serve_live(scope, receive, send)
                return
            await self._forward(scope, receive, send)
        elif kind == "lifespan":
            await self._lifespan(receive, send)
        # websockets are not proxied

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                self.session()
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.aclose()
                await send({"type": "lifespan.shutdown.complete"})
                return

    def session(self) -> aiohttp.ClientSession:
        """The upstream client session (made on first use, in the running loop): no pool
        limit, idle connections dropped after 4 s (before a 5 s keep-alive server, uvicorn's
        and many others' default, closes them under a request being sent), no cookie jar
        (a cookie one client's upstream set must not go out with another client's calls)."""
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=0, keepalive_timeout=4.0),
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=self.connect_timeout_s),
                cookie_jar=aiohttp.DummyCookieJar(),
                auto_decompress=False,
                max_line_size=MAX_FIELD_BYTES,
                max_field_size=MAX_FIELD_BYTES,
            )
        return self._session

    async def aclose(self) -> None:
        """Close the upstream connection pool."""
        session, self._session = self._session, None
        if session is not None:
            await session.close()

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
        message = await receive()
        if message["type"] == "http.disconnect":
            return
        body: bytes = message.get("body", b"")
        if message.get("more_body", False):
            buf = bytearray(body)
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    return
                buf += message.get("body", b"")
                if not message.get("more_body", False):
                    break
            body = bytes(buf)
        self.stats.requests += 1
        watch = _Watch(asyncio.current_task())
        watcher = asyncio.ensure_future(watch.run(receive))
        try:
            await self._relay(scope, body, send, watch)
        except asyncio.CancelledError:
            if not watch.fired:
                raise
            self.stats.client_disconnects += 1  # the upstream call was cancelled with us
            uncancel = getattr(asyncio.current_task(), "uncancel", None)
            if uncancel is not None:  # Python >= 3.11 counts cancellations
                uncancel()
        finally:
            watcher.cancel()

    async def _send(
        self, method: str, url: URL, headers: list[tuple[str, str]], body: bytes
    ) -> aiohttp.ClientResponse:
        """Send upstream; a connection the upstream closed while it sat idle in the pool (the
        keep-alive race: closed before a byte of the response) is retried once on a fresh
        one, as the official SDKs would retry it."""
        session = self.session()
        data = body if body or method not in ("GET", "HEAD", "DELETE", "OPTIONS") else None
        for attempt in (0, 1):
            try:
                return await session.request(
                    method,
                    url,
                    data=data,
                    headers=headers,
                    skip_auto_headers=_SKIP_AUTO,
                    allow_redirects=False,
                )
            except _STALE:
                if attempt:
                    raise
                self.stats.extra["stale_retries"] = self.stats.extra.get("stale_retries", 0) + 1
        raise AssertionError("unreachable")  # pragma: no cover

    async def _relay(self, scope: Scope, body: bytes, send: Send, watch: _Watch) -> None:
        raw_path: bytes = scope.get("raw_path") or scope["path"].encode("utf-8")
        url = URL(self.upstream.url_for(raw_path, scope.get("query_string", b"")), encoded=True)
        headers, session = request_headers(scope["headers"])
        method = scope["method"]
        t0 = time.perf_counter()
        try:
            response = await self._send(method, url, headers, body)
        except (aiohttp.ServerTimeoutError, asyncio.TimeoutError) as e:
            watch.finishing = True
            self.stats.upstream_unreachable += 1
            await self._unreachable(send, scope["path"], 504, e)
            return
        except aiohttp.ClientError as e:
            watch.finishing = True
            self.stats.upstream_unreachable += 1
            await self._unreachable(send, scope["path"], 502, e)
            return
        status = response.status
        # the recorder records tracked API calls with a 2xx status only (_Recorder.on_request,
        # on_response): nothing else is held or handed over (a large download is not kept)
        tap = self.tap if 200 <= status < 300 and tracked_api(method, scope["path"]) else None
        chunks: list[bytes] = []
        times: list[float] = []
        complete = False
        try:
            await send(
                {
                    "type": "http.response.start",
                    "status": status,
                    "headers": response_headers(response.raw_headers),
                }
            )
            content = response.content
            try:
                while True:
                    chunk = await content.readany()
                    if not chunk:
                        break
                    if tap is not None:
                        chunks.append(chunk)
                        times.append(time.perf_counter())
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
            except aiohttp.ClientError as e:
                self.stats.upstream_resets += 1
                log.info(
                    "promptcache proxy: upstream %s cut a response mid-body (%s)",
                    self.upstream.host,
                    type(e).__name__,
                )
                raise _UpstreamCut(type(e).__name__) from None
            complete = True
            watch.finishing = True
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            if complete:
                response.release()  # the connection goes back to the pool
            else:
                response.close()  # cut or abandoned: the upstream sees its connection close
            if tap is not None:
                tap.put(
                    Exchange(
                        method,
                        raw_path,
                        session,
                        body,
                        t0,
                        status,
                        [(k, v) for k, v in response.raw_headers if k.lower() in TAPPED_HEADERS],
                        chunks,
                        times,
                        time.perf_counter(),
                        time.time(),
                        complete,
                    )
                )

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


async def _plain(send: Send, status: int, text: bytes) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"text/plain; charset=utf-8")],
        }
    )
    await send({"type": "http.response.body", "body": text, "more_body": False})
