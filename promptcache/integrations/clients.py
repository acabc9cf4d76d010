"""``promptcache.wrap(client, tracker=None)``: record every call an official client makes.

Works with ``openai.OpenAI``, ``openai.AsyncOpenAI``, ``anthropic.Anthropic`` and
``anthropic.AsyncAnthropic`` (and their ``with_options``/``copy`` children, which share the
HTTP client), ``google.genai.Client`` (its sync HTTP client: ``generate_content`` and
``generate_content_stream``) and boto3 ``bedrock-runtime`` clients
(:mod:`promptcache.integrations.bedrock`: ``converse``, ``converse_stream``, ``invoke_model``). Tracking is done by *observing the HTTP exchange*: a request hook and a
response hook are added to the client's own HTTP client (``httpx``'s public
``event_hooks``), and the response body stream is wrapped so its bytes are seen as the SDK
reads them. The SDK still parses the response itself, so plain calls, ``stream=True``,
``.with_raw_response`` and ``.with_streaming_response`` all return exactly what the
unwrapped client returns; the wrapper never changes a byte.

For each successful (2xx) call of ``/chat/completions``, ``/completions``, ``/responses``
or ``/messages`` one ledger record is written when the body has been read to its end:
the normalized usage, its cost, ``latency_ms`` (request sent -> body complete),
``ttft_ms`` for streams (request sent -> first event carrying output), the model, the
prefix hash (the request's ``prompt_cache_key`` when present, which
``Prompt.to_openai`` derives from the prefix hash; otherwise a SHA-256 of the canonical
JSON of the request's static head: system prompt / instructions and tools) and the API.
Any failure inside tracking is logged on the ``promptcache.integrations.clients`` logger and never
raised into the caller.
"""

from __future__ import annotations

import hashlib
import importlib
import ipaddress
import json
import logging
import os
import threading
import time
import warnings
import weakref
import zlib
from collections.abc import Callable, Sequence
from typing import Any
from urllib.parse import urlsplit

from promptcache.errors import PromptCacheWarning
from promptcache.integrations import httpx_hooks
from promptcache.integrations.bedrock import wrap_bedrock
from promptcache.integrations.usage_advice import no_usage_advice
from promptcache.ledger.pricing import Price
from promptcache.ledger.tracker import Tracker
from promptcache.providers.usage import normalize_usage
from promptcache.providers.usage_record import Usage, unknown_usage

__all__ = ["wrap", "request_prefix_hash", "provider_for_host", "tracked_api", "SESSION_HEADER"]

log = logging.getLogger("promptcache.integrations.clients")

_TRACKED_PATHS = {
    "/chat/completions": "chat.completions",
    "/completions": "completions",
    "/responses": "responses",
    "/messages": "messages",
}
#: The local engine's response header saying why it cached nothing in its cache mode
#: (``local_engine/server/emulation.py``: ``CACHE_NOTE_HEADER``, read 2026-12-03).
CACHE_NOTE_HEADER = "x-promptcache-cache-note"
#: The SDK whose host rules label a bare httpx client's request, by API path.
_SDK_OF_API = {"messages": "anthropic", "gemini": "google"}
#: Per-call lineage key: ``client.messages.create(..., extra_headers={SESSION_HEADER: id})``
#: (the header also reaches the provider, which ignores it).
SESSION_HEADER = "X-Promptcache-Session"


def provider_for_host(host: str, sdk: str) -> str:
    """The ledger's provider label for a base URL host: ``openai``, ``azure_openai``,
    ``anthropic``, ``deepseek``, ``local`` (a loopback host), else ``openai_compatible``
    for the openai SDK and ``anthropic`` for the anthropic SDK."""
    host = (host or "").lower().strip("[]")
    if host == "api.openai.com":
        return "openai"
    if host.endswith(".openai.azure.com"):
        return "azure_openai"
    if host == "api.anthropic.com":
        return "anthropic"
    if host == "api.deepseek.com":
        return "deepseek"
    if host == "generativelanguage.googleapis.com":
        return "gemini"
    if host.endswith("aiplatform.googleapis.com"):
        return "vertex"
    try:
        if host == "localhost" or ipaddress.ip_address(host).is_loopback:
            return "local"
    except ValueError:
        pass
    if sdk == "google":
        return "gemini"
    return "anthropic" if sdk == "anthropic" else "openai_compatible"


def tracked_api(method: str, path: str) -> str | None:
    """The API of a request the recorder tracks (``chat.completions``, ``completions``,
    ``responses``, ``messages``, ``gemini``), from its method and URL path; None for any
    other request (nothing is recorded for it)."""
    if method != "POST":
        return None
    path = path.rstrip("/")
    if path.endswith("/chat/completions"):
        return "chat.completions"
    api = next((name for suffix, name in _TRACKED_PATHS.items() if path.endswith(suffix)), None)
    if api is None and path.endswith((":generateContent", ":streamGenerateContent")):
        api = "gemini"
    return api


def request_prefix_hash(api: str, body: dict[str, Any]) -> str | None:
    """A stable id for a request's cacheable head.

    ``prompt_cache_key`` when the request has one; otherwise the SHA-256 (hex) of the
    canonical JSON (keys sorted, no spaces) of the static head: ``tools`` plus the
    system prompt (Anthropic ``system``; Responses ``instructions``; chat: the leading
    ``system``/``developer`` messages). None when the request has no such head.
    """
    key = body.get("prompt_cache_key")
    if isinstance(key, str) and key:
        return key
    head: dict[str, Any] = {}
    if body.get("tools"):
        head["tools"] = body["tools"]
    if api == "messages" and body.get("system"):
        head["system"] = body["system"]
    elif api == "responses" and body.get("instructions"):
        head["instructions"] = body["instructions"]
    elif api == "chat.completions":
        lead = []
        for m in body.get("messages") or []:
            if isinstance(m, dict) and m.get("role") in ("system", "developer"):
                lead.append(m)
            else:
                break
        if lead:
            head["system"] = lead
    if not head:
        return None
    text = json.dumps(head, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _decoder_for(response: Any) -> Callable[[bytes], bytes]:
    """A fresh decoder for the response's Content-Encoding (gzip/deflate/br/zstd)."""
    codings = [
        c.strip().lower()
        for c in response.headers.get("content-encoding", "").split(",")
        if c.strip() and c.strip().lower() != "identity"
    ]
    if not codings:
        return lambda b: b
    root = type(response).__module__.split(".")[0]
    try:
        supported = importlib.import_module(f"{root}._decoders").SUPPORTED_DECODERS
        decoders = [supported[c]() for c in reversed(codings)]
        return lambda b: _chain(decoders, b)
    except Exception:  # fall back to zlib for the common encodings
        objs = []
        for c in reversed(codings):
            if c not in ("gzip", "deflate"):
                raise ValueError(f"cannot decode Content-Encoding {c!r} for tracking") from None
            objs.append(zlib.decompressobj(16 + zlib.MAX_WBITS if c == "gzip" else zlib.MAX_WBITS))

        def dec(b: bytes) -> bytes:
            for o in objs:
                b = o.decompress(b)
            return b

        return dec


def _chain(decoders: list[Any], data: bytes) -> bytes:
    for d in decoders:
        data = d.decode(data)
    return data


class _Call:
    """What is known about one tracked HTTP exchange."""

    __slots__ = (
        "api",
        "body",
        "t0",
        "t_first",
        "t_end",
        "stream",
        "events",
        "buf",
        "sse_buf",
        "decode",
        "done",
        "status",
        "lock",
        "session",
        "provider",
        "note",
    )

    def __init__(self, api: str, body: dict[str, Any], t0: float) -> None:
        self.api, self.body, self.t0 = api, body, t0
        self.t_first: float | None = None
        self.t_end: float | None = None
        self.stream = bool(body.get("stream"))
        self.events: list[dict[str, Any]] = []
        self.buf = bytearray()
        self.sse_buf = ""
        self.decode: Callable[[bytes], bytes] = lambda b: b
        self.done = False
        self.status = 0
        self.lock = threading.Lock()
        self.session: str | None = None
        self.provider: str | None = None
        #: the serving engine's note on why it cached nothing (CACHE_NOTE_HEADER)
        self.note: str | None = None


def _is_output_event(api: str, ev: dict[str, Any]) -> bool:
    """Does this stream event carry generated output (for time to first token)?"""
    kind = ev.get("type")
    if api == "gemini":
        return any(
            (part or {}).get("text")
            for cand in ev.get("candidates") or []
            for part in ((cand or {}).get("content") or {}).get("parts") or []
        )
    if api == "messages":
        return kind == "content_block_delta"
    if api == "responses":
        return isinstance(kind, str) and kind.endswith(".delta")
    for choice in ev.get("choices") or []:
        delta = choice.get("delta") or {}
        if (
            delta.get("content")
            or delta.get("tool_calls")
            or delta.get("reasoning_content")
            or choice.get("text")
        ):
            return True
    return False


class _Recorder:
    """Shared state of one wrapped client: turns observed exchanges into ledger records."""

    def __init__(
        self,
        sdk: str,
        base_host: str,
        tracker: Any,
        provider: str | None,
        price: Price | None,
        callbacks: Sequence[Callable[..., Any]],
        metadata: dict[str, Any] | None,
        trace: str | os.PathLike[str] | None = None,
        session: str | None = None,
        clock: Callable[[], float] | None = None,
        rules: Any = None,
    ) -> None:
        self.sdk = sdk
        self.session = session
        self.clock = clock
        self.rules = rules
        self.trace: Any = None
        if trace is not None:
            from promptcache.simulation.simulate import TraceWriter

            self.trace = TraceWriter(trace)
        # None for a bare httpx client: the label is taken per request from its host
        self.provider: str | None = provider or (
            provider_for_host(base_host, sdk) if sdk != "httpx" else None
        )
        self._usage_warned = False
        self._tracker = tracker
        self._tracker_lock = threading.Lock()
        self.price = price
        self.callbacks = list(callbacks)
        self.metadata = dict(metadata or {})
        # keyed by the request object, weakly: a request that never gets a response
        # (connection error) leaves nothing behind
        self.calls: weakref.WeakKeyDictionary[Any, _Call] = weakref.WeakKeyDictionary()

    @property
    def tracker(self) -> Any:
        if self._tracker is None:
            with self._tracker_lock:
                if self._tracker is None:
                    self._tracker = Tracker()
        return self._tracker

    # -- request side ------------------------------------------------------------

    def on_request(self, request: Any) -> None:
        try:
            path = request.url.path.rstrip("/")
            api = tracked_api(request.method, path)
            if api is None:
                return
            gemini_model = None
            if api == "gemini":
                # google-genai: .../models/{model}:generateContent (or streamed, alt=sse)
                gemini_model = path.rsplit("/", 1)[-1].split(":", 1)[0]
            try:
                body = json.loads(request.content or b"{}")
            except (ValueError, UnicodeDecodeError):
                body = {}
            if not isinstance(body, dict):
                body = {}
            if gemini_model and "model" not in body:
                body = {**body, "model": gemini_model}
            call = _Call(api, body, time.perf_counter())
            call.session = request.headers.get(SESSION_HEADER) or None
            call.provider = self.provider or provider_for_host(
                request.url.host, _SDK_OF_API.get(api, "openai")
            )
            self.calls[request] = call
        except Exception:  # never break the caller
            log.exception("promptcache: could not inspect a request for tracking")

    # -- response side -----------------------------------------------------------

    def on_response(self, response: Any) -> None:
        call = self.calls.pop(response.request, None)
        if call is None:
            return
        try:
            call.status = response.status_code
            if not (200 <= response.status_code < 300):
                return
            call.note = response.headers.get(CACHE_NOTE_HEADER) or None
            ctype = response.headers.get("content-type", "")
            call.stream = call.stream or "text/event-stream" in ctype
            already = getattr(response, "_content", None)
            if isinstance(already, bytes):  # body read before the hook (in-memory transports)
                self.feed(call, already)  # httpx keeps it decoded: no Content-Encoding step
                self.finish(call)
                return
            call.decode = _decoder_for(response)
            root = importlib.import_module(type(response).__module__.split(".")[0])
            inner = response.stream
            if isinstance(inner, root.AsyncByteStream) and not isinstance(
                inner, root.SyncByteStream
            ):
                response.stream = _make_async_stream(root, inner, self, call)
            else:
                response.stream = _make_sync_stream(root, inner, self, call)
        except Exception:
            log.exception("promptcache: could not attach tracking to a response")

    def feed(self, call: _Call, chunk: bytes) -> None:
        try:
            data = call.decode(chunk)
            if not call.stream:
                call.buf += data
                return
            call.sse_buf += data.decode("utf-8", errors="replace")
            call.sse_buf = call.sse_buf.replace("\r\n", "\n")
            while "\n\n" in call.sse_buf:
                block, call.sse_buf = call.sse_buf.split("\n\n", 1)
                self._event(call, block)
        except Exception:
            log.exception("promptcache: could not read a response chunk for tracking")
            call.done = True  # stop tracking this call, keep serving the caller

    def _event(self, call: _Call, block: str) -> None:
        data = "\n".join(
            line[5:].lstrip(" ") for line in block.split("\n") if line.startswith("data:")
        )
        if not data or data.strip() == "[DONE]":
            return
        try:
            ev = json.loads(data)
        except ValueError:
            return
        if not isinstance(ev, dict):
            return
        if call.t_first is None and _is_output_event(call.api, ev):
            call.t_first = time.perf_counter()
        call.events.append(ev)

    def finish(self, call: _Call) -> None:
        with call.lock:
            if call.done:
                return
            call.done = True
        try:
            if call.t_end is None:  # (a replayed call, promptcache.proxy, brings its own)
                call.t_end = time.perf_counter()
            if call.stream:
                if call.sse_buf.strip():
                    self._event(call, call.sse_buf)
                if not call.events:
                    return
                payload: Any = call.events
            else:
                if not call.buf:
                    return
                payload = json.loads(bytes(call.buf))
            self._record(call, payload)
        except Exception:
            log.exception("promptcache: could not record a call in the ledger")

    def _record(self, call: _Call, payload: Any) -> None:
        provider = call.provider or self.provider or "openai_compatible"
        fmt = (
            "anthropic"
            if call.api == "messages"
            else "gemini"
            if call.api == "gemini"
            else ("openai" if provider in ("openai", "azure_openai") else "openai_compatible")
        )
        if fmt == "openai_compatible" and provider == "deepseek":
            fmt = "deepseek"
        try:
            usage: Usage = normalize_usage(fmt, payload)
        except Exception as e:
            # recorded all the same, usage unknown: the report counts it apart
            usage = unknown_usage()
            self._warn_no_usage(call, e)
        t_end = time.perf_counter() if call.t_end is None else call.t_end
        latency_ms = (t_end - call.t0) * 1000.0
        ttft_ms = None if call.t_first is None else (call.t_first - call.t0) * 1000.0
        self.store(
            usage,
            api=call.api,
            body=call.body,
            latency_ms=latency_ms,
            ttft_ms=ttft_ms,
            stream=call.stream,
            session=call.session,
            provider=provider,
            cache_note=call.note,
        )

    def _warn_no_usage(self, call: _Call, error: Exception) -> None:
        """Log each call without usage; warn once per wrapped client how to get it."""
        log.info("promptcache: a %s call recorded with usage unknown: %s", call.api, error)
        if self._usage_warned:
            return
        self._usage_warned = True
        warnings.warn(no_usage_advice(call.api, call.stream), PromptCacheWarning, stacklevel=2)

    def store(
        self,
        usage: Usage,
        *,
        api: str,
        body: dict[str, Any],
        latency_ms: float | None,
        ttft_ms: float | None,
        stream: bool,
        session: str | None = None,
        model: str | None = None,
        provider: str | None = None,
        cache_note: str | None = None,
    ) -> None:
        """Write one record (and attribute its miss) and call the callbacks."""
        provider = provider or self.provider or "openai_compatible"
        model = usage.model or model or body.get("model")
        usage = usage.replace(provider=provider, model=model)
        prefix_hash = request_prefix_hash(api, body)
        session = session or self.session
        fields: dict[str, Any] = dict(
            model=model,
            provider=provider,
            api=api,
            prefix_hash=prefix_hash,
            latency_ms=latency_ms,
            ttft_ms=ttft_ms,
            stream=stream,
            metadata=self.metadata or None,
            price=self.price,
        )
        if getattr(self.tracker, "store_prompts", False):
            fields["prompt"] = json.dumps(body, ensure_ascii=False, default=str)
        private = {"prompt"}
        if hasattr(self.tracker, "attribute"):  # a ledger Tracker: attribute the miss
            fields["request"] = body
            # a named session, else the predecessor is found by shared prefix
            fields["lineage"] = f"session:{session}" if session else None
            fields["cache_note"] = cache_note
            private |= {"request", "lineage", "cache_note"}
            if self.rules is not None:
                fields["rules"] = self.rules
                private.add("rules")
        if self.clock is not None:
            fields["ts"] = self.clock()
            private.add("ts")
        self.tracker.record(usage, **fields)
        if self.trace is not None:
            try:
                self.trace.write(body, model, usage.output_tokens, time.time())
            except (ValueError, OSError) as e:
                log.warning("promptcache: no trace line written for a %s call: %s", api, e)
        for cb in self.callbacks:
            try:
                cb(usage, **{k: v for k, v in fields.items() if k not in private})
            except Exception:
                log.exception("promptcache: a wrap() callback failed")


def _make_sync_stream(root: Any, inner: Any, rec: _Recorder, call: _Call) -> Any:
    class TrackingSyncStream(root.SyncByteStream):  # type: ignore[misc]
        def __iter__(self) -> Any:
            for chunk in inner:
                rec.feed(call, chunk)
                yield chunk
            rec.finish(call)

        def close(self) -> None:
            try:
                inner.close()
            finally:
                if call.stream:  # a stream closed early still has what was seen
                    rec.finish(call)

    return TrackingSyncStream()


def _make_async_stream(root: Any, inner: Any, rec: _Recorder, call: _Call) -> Any:
    class TrackingAsyncStream(root.AsyncByteStream):  # type: ignore[misc]
        async def __aiter__(self) -> Any:
            async for chunk in inner:
                rec.feed(call, chunk)
                yield chunk
            rec.finish(call)

        async def aclose(self) -> None:
            try:
                await inner.aclose()
            finally:
                if call.stream:
                    rec.finish(call)

    return TrackingAsyncStream()


def _http_of(client: Any) -> tuple[Any, str, str]:
    """``(httpx client, base URL, sdk)`` of what :func:`wrap` was given: the client itself
    for an httpx client (sdk ``"httpx"``), the SDK's for an official client.

    Raises:
        TypeError: neither.
    """
    if httpx_hooks.is_httpx_client(client):
        return client, str(getattr(client, "base_url", "") or ""), "httpx"
    http: Any = getattr(client, "_client", None)
    host_url = getattr(client, "base_url", "")
    api_client = getattr(client, "_api_client", None)
    if api_client is not None and hasattr(api_client, "_httpx_client"):
        # google-genai: Client()._api_client holds the httpx(2) client it sends with
        http = api_client._httpx_client
        opts = getattr(api_client, "_http_options", None)
        host_url = getattr(opts, "base_url", None) or "https://generativelanguage.googleapis.com"
    if not isinstance(getattr(http, "event_hooks", None), dict):
        raise TypeError(
            f"promptcache.wrap() takes an openai or anthropic client, an httpx.Client or "
            f"AsyncClient, a google-genai Client or a boto3 bedrock-runtime client, got "
            f"{type(client).__module__}.{type(client).__name__}"
        )
    return http, str(host_url), type(client).__module__.split(".")[0]


def wrap(
    client: Any,
    tracker: Any = None,
    *,
    provider: str | None = None,
    price: Price | None = None,
    callbacks: Sequence[Callable[..., Any]] = (),
    metadata: dict[str, Any] | None = None,
    trace: str | os.PathLike[str] | None = None,
    session: str | None = None,
    clock: Callable[[], float] | None = None,
    rules: Any = None,
) -> Any:
    """Record every completion call ``client`` makes; returns the same ``client``.

    ``client``: ``openai.OpenAI``/``AsyncOpenAI`` or ``anthropic.Anthropic``/
    ``AsyncAnthropic`` (or another Stainless-generated client with an httpx ``_client``),
    or an ``httpx.Client``/``AsyncClient`` to hand to a framework or SDK as its
    ``http_client=`` (:mod:`promptcache.integrations.httpx_hooks`; the provider label is
    then taken per request from its host).
    ``tracker``: a :class:`~promptcache.Tracker` (default: ``Tracker()`` at the default
    path, opened on the first record). ``provider``: the ledger label (default: from the
    base URL's host, see :func:`provider_for_host`). ``price``: a
    :class:`~promptcache.Price` for every call (default: the model's bundled row; e.g.
    to cost local-engine traffic at a hosted model's prices). ``callbacks``: called as
    ``cb(usage, model=..., provider=..., api=..., prefix_hash=..., latency_ms=...,
    ttft_ms=..., stream=..., metadata=..., price=...)`` after each record (e.g.
    :mod:`promptcache.reports.export`). ``metadata``: a JSON-able dict stored with each record.
    ``trace``: also append each recorded call to this JSON Lines file as a segments trace
    line (block hashes and token counts, no prompt text; see
    :func:`promptcache.simulation.simulate.trace_line`) for ``promptcache simulate``.

    Miss attribution: each record carries why it missed (``Record.miss_cause``,
    ``miss_path``, ``matched_prefix_tokens``), comparing the request with the previous one
    it continues: by default the recent request of the same provider and model -- of any
    conversation in this process -- sharing the longest prefix with it
    (:mod:`promptcache.misses.lineage`); ``session``: one lineage key for every call of
    this client; per call, the header ``X-Promptcache-Session``
    (``extra_headers={promptcache.integrations.clients.SESSION_HEADER: key}``), which wins
    over the prefix lookup. A response carrying the local engine's
    ``X-Promptcache-Cache-Note`` (its cache mode cannot cache this request) is attributed
    ``no_breakpoint`` with that note. A response without usage is recorded with usage
    unknown (no cost, no cause), with one :class:`~promptcache.PromptCacheWarning` per
    wrapped client on how to ask for usage. ``clock``: seconds callable for the
    records' timestamps (default ``time.time``; tests pass a fake clock to step past TTLs).
    ``rules``: the :class:`~promptcache.limits.CacheLimits` to attribute with (default: the
    model's row; e.g. OpenAI's rules for a local server emulating them).

    Wrapping twice for the same tracker (or with ``tracker=None``) is a no-op. Raises
    ``TypeError`` for an object that is not such a client, and
    :class:`~promptcache.integrations.httpx_hooks.WrapConflictError` when its HTTP client is
    already tracked for another tracker; nothing else is ever raised from tracking.
    """
    opts: dict[str, Any] = dict(trace=trace, session=session, clock=clock, rules=rules)
    if hasattr(getattr(client, "meta", None), "events"):  # a botocore client
        rec = _Recorder(
            "boto3", "", tracker, provider or "bedrock", price, callbacks, metadata, **opts
        )
        return wrap_bedrock(client, rec)
    http, host_url, sdk = _http_of(client)
    if httpx_hooks.check_tracker(http, tracker):
        return client  # already tracked for this tracker: hooks are installed once
    host = urlsplit(str(host_url)).hostname or ""
    rec = _Recorder(sdk, host, tracker, provider, price, callbacks, metadata, **opts)
    httpx_hooks.install(http, rec.on_request, rec.on_response)
    setattr(http, httpx_hooks.MARK, rec)
    return client
