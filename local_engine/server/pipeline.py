"""One pipeline for the generation routes (``/v1/chat/completions``, ``/v1/completions``,
``/v1/messages``).

Every route runs the same steps, in this order (:func:`run_endpoint`):

1. parse the body against the endpoint's request model (400 with the field path);
2. the endpoint's protocol checks (message order, tool choice);
3. render the prompt(s) to token ids (one per prompt: legacy completions take several);
4. one :class:`~.emulation.CacheRequest` per prompt, each validated by the cache emulator
   against the endpoint's provider rules;
5. the endpoint's extra preparation (Messages: the diagnostics fingerprint);
6. the engine's ``SamplingParams`` from the body;
7. submit each prompt and wait for its first output (after prefill); the emulated cache
   usage per prompt; on any failure every started engine request is closed (aborted);
8. the response: the endpoint's JSON body once all outputs are final, or its server-sent
   events, with the request's log line and token metrics recorded either way.

An :class:`Endpoint` supplies the differences; the API modules (``routes_openai``,
``routes_anthropic``) define one each, over the request models and conversions of
``protocol_openai`` / ``protocol_anthropic``.
"""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from fastapi import Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel

from promptcache.simulation.emulation import CacheUsage

from .emulation import CacheRequest
from .errors import parse_body
from .generation import (
    SSE_HEADERS,
    ClientGone,
    ClosingStreamingResponse,
    Timing,
    collect,
    note,
    note_prompt,
    start_request,
)
from .rendering import RenderedPrompt
from .state import ServerState, new_id

if TYPE_CHECKING:  # the engine's types only: the server imports torch only through the engine
    from ..outputs import RequestOutput
    from ..sampling import SamplingParams


@dataclass
class Generation:
    """One route request in flight, from step 7 on.

    Attributes:
        request: the HTTP request (its ``state`` carries the log line).
        st: the app's :class:`ServerState`.
        req: the parsed body (the endpoint's request model).
        rid: the response id (``chatcmpl-…``, ``cmpl-…``, ``msg_…``).
        rendered, cache_requests: per prompt, in order.
        params: the sampling parameters shared by all prompts.
        timing: TTFT and inter-token latency, observed into the server metrics.
        started: per prompt, the engine output iterator and its first output.
        usages: per prompt, the emulated cache usage.
        created: Unix time in seconds of the response.
        extra: what the endpoint's ``prepare`` returned.
        finished: set by a stream once the engine's outputs are all delivered (a stream
            closed before that is logged ``finish=client_disconnected``).
    """

    request: Request
    st: ServerState
    req: Any
    rid: str
    rendered: list[RenderedPrompt]
    cache_requests: list[CacheRequest]
    params: SamplingParams
    timing: Timing
    started: list[tuple[AsyncGenerator[RequestOutput, None], RequestOutput]] = field(
        default_factory=list
    )
    usages: list[CacheUsage] = field(default_factory=list)
    # the engine's prefix-cache hits of all prompts by tier, tokens (usage extension field)
    tiers: dict[str, int] = field(default_factory=lambda: {"gpu": 0, "cpu": 0})
    created: int = 0
    extra: Any = None
    finished: bool = False

    @property
    def report_writes(self) -> bool:
        """Whether OpenAI-shaped usage reports cache writes (not in automatic mode)."""
        return (self.cache_requests[0].mode or self.st.emulator.mode) != "automatic"

    def total_usage(self) -> CacheUsage:
        """The emulated usage of all prompts together (the one prompt's when there is one)."""
        usages = self.usages
        if len(usages) == 1:
            return usages[0]
        return CacheUsage(
            sum(u.prompt_tokens for u in usages),
            sum(u.cache_read_tokens for u in usages),
            {"total": sum(u.cache_write_total for u in usages)}
            if any(u.cache_write_total for u in usages)
            else {},
            sum(u.uncached_tokens for u in usages),
            writes_reported=all(u.writes_reported for u in usages),
        )

    def record_usage(self, output_tokens: int) -> CacheUsage:
        """Put the token counts and TTFT on the log line and into the server metrics; returns
        :meth:`total_usage`."""
        usage = self.total_usage()
        ttft = self.timing.ttft
        note(
            self.request,
            prompt_tokens=usage.prompt_tokens,
            cached_tokens=usage.cache_read_tokens,
            cache_write_tokens=usage.cache_write_total or None,
            output_tokens=output_tokens,
            ttft_ms=None if ttft is None else round(ttft * 1000, 1),
        )
        m = self.st.metrics
        m.prompt_tokens.inc(usage.prompt_tokens)
        m.cached_tokens.inc(usage.cache_read_tokens)
        m.write_tokens.inc(usage.cache_write_total)
        m.output_tokens.inc(output_tokens)
        return usage

    async def collect(self) -> list[RequestOutput] | None:
        """Every prompt's final output, in order; None when the client went away (logged as
        ``finish=client_disconnected``; the engine requests are aborted)."""
        finals = []
        try:
            for agen, first in self.started:
                finals.append(await collect(self.request, agen, first, self.timing))
        except ClientGone:
            note(self.request, finish="client_disconnected")
            return None
        finally:
            await self.close()
        return finals

    async def close(self) -> None:
        """Close every engine output iterator (aborting the requests still running)."""
        for agen, _ in self.started:
            await agen.aclose()


class Endpoint:
    """What one generation route does differently; see the module docstring for the steps
    that call each method.

    Attributes:
        body_model: the pydantic request model (also the route's OpenAPI request schema).
        api: ``"openai"`` or ``"anthropic"``: whose cache rules validate the request.
        id_prefix: of the response id.
    """

    body_model: ClassVar[type[BaseModel]]
    api: ClassVar[str]
    id_prefix: ClassVar[str]

    def check(self, req: Any) -> None:
        """Protocol checks beyond the model's (raise ``APIError`` 400)."""

    def render(self, st: ServerState, req: Any) -> list[RenderedPrompt]:
        """The prompt(s) as token ids with their block boundaries (raise ``APIError`` 400)."""
        raise NotImplementedError

    def cache_request(
        self, st: ServerState, request: Request, req: Any, rendered: RenderedPrompt
    ) -> CacheRequest:
        """What the cache emulator needs to know about one rendered prompt."""
        raise NotImplementedError

    def prepare(self, st: ServerState, req: Any, raw: bytes, rendered: list[RenderedPrompt]) -> Any:
        """Extra work once the request is valid, before sampling (kept as ``Generation.extra``)."""
        return None

    def sampling_params(self, req: Any) -> SamplingParams:
        """The engine's sampling parameters (raise ``APIError`` 400)."""
        raise NotImplementedError

    def engine_request_ids(self, rid: str, num_prompts: int) -> list[str]:
        """The engine request id of each prompt (default: the response id; one prompt)."""
        return [rid]

    def on_started(self, gen: Generation) -> None:
        """Called once every prompt has its first output and usage."""

    def response(self, gen: Generation, finals: list[RequestOutput]) -> Response:
        """The non-streaming response from every prompt's final output."""
        raise NotImplementedError

    def events(self, gen: Generation) -> AsyncGenerator[str, None]:
        """The server-sent events (set ``gen.finished`` once the outputs are all delivered)."""
        raise NotImplementedError

    def stream_headers(self, gen: Generation) -> dict[str, str]:
        """Headers of the streaming response."""
        return SSE_HEADERS


async def _start(gen: Generation, ids: Sequence[str]) -> None:
    """Submit each prompt, wait for its first output and work out its emulated usage; on any
    failure close what was started and re-raise."""
    st = gen.st
    try:
        for rid, rendered, creq in zip(ids, gen.rendered, gen.cache_requests):
            gen.started.append(
                await start_request(st, rid, rendered.token_ids, gen.params, creq.salt)
            )
        gen.usages = [
            st.emulator.usage(creq, first.num_cached_tokens)
            for creq, (_, first) in zip(gen.cache_requests, gen.started)
        ]
        gen.tiers = {
            "gpu": sum(first.num_gpu_cached_tokens for _, first in gen.started),
            "cpu": sum(first.num_cpu_cached_tokens for _, first in gen.started),
        }
        if getattr(st.engine.engine, "disk_tier", None) is not None:  # --disk-cache-dir
            gen.tiers["disk"] = sum(first.num_disk_cached_tokens for _, first in gen.started)
    except BaseException:
        await gen.close()
        raise


async def _guard(gen: Generation, events: AsyncGenerator[str, None]) -> AsyncGenerator[str, None]:
    """``events``, then (also when the client leaves mid-stream) the log note of an
    unfinished stream and the engine requests closed."""
    try:
        async for chunk in events:
            yield chunk
    finally:
        if not gen.finished:
            note(gen.request, finish="client_disconnected")
        await events.aclose()
        await gen.close()


async def run_endpoint(endpoint: Endpoint, request: Request) -> Response:
    """Run ``request`` through the steps of the module docstring with ``endpoint``'s parts.

    Raises:
        APIError: 400 for a bad body, prompt or sampling field (in the provider's shape, by
            the app's handler), 503 when the engine does not accept requests.
    """
    st: ServerState = request.app.state.server
    raw = await request.body()
    req = parse_body(endpoint.body_model, raw)
    endpoint.check(req)
    rendered = endpoint.render(st, req)
    creqs = [endpoint.cache_request(st, request, req, r) for r in rendered]
    for creq in creqs:
        st.emulator.validate(creq, api=endpoint.api)
    extra = endpoint.prepare(st, req, raw, rendered)
    params = endpoint.sampling_params(req)
    rid = new_id(endpoint.id_prefix)
    timing = Timing(st, getattr(request.state, "arrival", time.monotonic()))
    gen = Generation(request, st, req, rid, rendered, creqs, params, timing, extra=extra)
    note(request, id=rid, model=req.model, stream=bool(req.stream))
    note_prompt(request, st, rendered[0].token_ids)
    await _start(gen, endpoint.engine_request_ids(rid, len(rendered)))
    endpoint.on_started(gen)
    for _, first in gen.started:
        timing.observe(first)
    gen.created = int(time.time())
    if not req.stream:
        finals = await gen.collect()
        if finals is None:
            return JSONResponse({}, status_code=499)
        return endpoint.response(gen, finals)
    return ClosingStreamingResponse(
        _guard(gen, endpoint.events(gen)),
        media_type="text/event-stream",
        headers=endpoint.stream_headers(gen),
    )
