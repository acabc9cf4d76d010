"""Anthropic-compatible routes: ``/v1/messages`` (plain and streaming) and
``/v1/messages/count_tokens``.

Streaming follows the documented event sequence
(https://platform.claude.com/docs/en/build-with-claude/streaming, 2026-11-29):
``message_start`` (with usage) -> ``content_block_start`` -> ``ping`` ->
``content_block_delta``* -> ``content_block_stop`` -> ``message_delta`` (stop reason and
final usage) -> ``message_stop``. ``x-api-key`` and ``anthropic-version`` are accepted.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from .diagnostics import Fingerprint
from .emulation import CacheRequest, anthropic_breakpoints, anthropic_usage_body, request_mode
from .errors import APIError, parse_body
from .generation import (
    SSE_HEADERS,
    ClientGone,
    ClosingStreamingResponse,
    Timing,
    collect,
    make_sampling_params,
    note,
    note_prompt,
    request_salt,
    start_request,
    text_delta,
)
from .protocol_anthropic import (
    CountTokensRequest,
    MessagesRequest,
    check_message_order,
    check_tool_choice,
    messages_to_turns,
)
from .rendering import RenderedPrompt, RenderError, render_chat
from .state import ServerState, new_id

router = APIRouter()


def _event(name: str, data: dict) -> str:
    return (
        f"event: {name}\ndata: "
        + json.dumps(data, separators=(",", ":"), ensure_ascii=False)
        + "\n\n"
    )


def _render(st: ServerState, req: CountTokensRequest) -> RenderedPrompt:
    try:
        tools, system, turns, cont = messages_to_turns(req)
        return render_chat(
            st.tokenizer, tools=tools, system=system, turns=turns, continue_final=cont
        )
    except RenderError as exc:
        raise APIError(400, str(exc)) from None


def stop_fields(o: Any) -> tuple[str, str | None]:
    """(stop_reason, stop_sequence) of a finished sample."""
    if o.finish_reason == "length":
        return "max_tokens", None
    if isinstance(getattr(o, "stop_reason", None), str):
        return "stop_sequence", o.stop_reason
    return "end_turn", None


@router.post("/v1/messages/count_tokens")
async def count_tokens(request: Request):
    """``POST /v1/messages/count_tokens``: Anthropic token counting, ``{"input_tokens": n}``
    for the prompt a Messages request with these fields would have."""
    st: ServerState = request.app.state.server
    req = parse_body(CountTokensRequest, await request.body())
    check_message_order(req)
    check_tool_choice(req, generating=False)
    rendered = _render(st, req)
    return JSONResponse({"input_tokens": rendered.num_tokens})


@router.post("/v1/messages")
async def messages(request: Request):
    """``POST /v1/messages``: Anthropic Messages API, a ``message`` object or, with
    ``stream``, the documented server-sent event sequence (see the module docstring)."""
    st: ServerState = request.app.state.server
    raw = await request.body()
    req = parse_body(MessagesRequest, raw)
    check_message_order(req)
    check_tool_choice(req)
    rendered = _render(st, req)
    ends = rendered.message_ends
    last_user = max(
        (i for i, m in enumerate(req.messages) if m.role == "user" and i < len(ends)), default=None
    )
    creq = CacheRequest(
        model=req.model,
        rendered=rendered,
        salt=request_salt(request, req.cache_salt),
        anthropic_breakpoints=anthropic_breakpoints(rendered),
        implicit_end=ends[last_user] if last_user is not None else None,
        mode=request_mode(request.headers),
    )
    st.emulator.validate(creq, api="anthropic")
    fp = Fingerprint.of(json.loads(raw), rendered) if req.diagnostics is not None else None
    diagnostics = st.diagnostics.diagnose(req.diagnostics.previous_message_id, fp) if fp else None
    params = make_sampling_params(
        temperature=req.temperature,
        top_p=req.top_p,
        top_k=req.top_k,
        max_tokens=req.max_tokens,
        stop=req.stop_sequences,
    )
    mid = new_id("msg_")
    arrival = getattr(request.state, "arrival", time.monotonic())
    timing = Timing(st, arrival)
    note(request, id=mid, model=req.model, stream=bool(req.stream))
    note_prompt(request, st, rendered.token_ids)
    agen, first = await start_request(st, mid, rendered.token_ids, params, creq.salt)
    try:
        usage = st.emulator.usage(creq, first.num_cached_tokens)
    except BaseException:
        await agen.aclose()
        raise
    if fp is not None:
        st.diagnostics.put(mid, fp)
    timing.observe(first)

    def usage_body(out: Any) -> dict:
        n_out = len(out.outputs[0].token_ids)
        note(
            request,
            prompt_tokens=usage.prompt_tokens,
            cached_tokens=usage.cache_read_tokens,
            cache_write_tokens=usage.cache_write_total or None,
            output_tokens=n_out,
            ttft_ms=None if timing.ttft is None else round(timing.ttft * 1000, 1),
        )
        st.metrics.prompt_tokens.inc(usage.prompt_tokens)
        st.metrics.cached_tokens.inc(usage.cache_read_tokens)
        st.metrics.write_tokens.inc(usage.cache_write_total)
        st.metrics.output_tokens.inc(n_out)
        return anthropic_usage_body(usage, n_out)

    message = {"id": mid, "type": "message", "role": "assistant", "model": req.model}

    if not req.stream:
        try:
            final = await collect(request, agen, first, timing)
        except ClientGone:
            note(request, finish="client_disconnected")
            return JSONResponse({}, status_code=499)
        o = final.outputs[0]
        reason, seq = stop_fields(o)
        note(request, finish=reason)
        body = {
            **message,
            "content": [{"type": "text", "text": o.text}],
            "stop_reason": reason,
            "stop_sequence": seq,
            "usage": usage_body(final),
        }
        if fp is not None:
            body["diagnostics"] = diagnostics
        return JSONResponse(body, headers={"request-id": getattr(request.state, "request_id", mid)})

    async def events() -> AsyncIterator[str]:
        finished = False
        try:
            start_usage = anthropic_usage_body(usage, 1)
            start = {
                **message,
                "content": [],
                "stop_reason": None,
                "stop_sequence": None,
                "usage": start_usage,
            }
            if fp is not None:
                start["diagnostics"] = diagnostics
            yield _event("message_start", {"type": "message_start", "message": start})
            yield _event(
                "content_block_start",
                {
                    "type": "content_block_start",
                    "index": 0,
                    "content_block": {"type": "text", "text": ""},
                },
            )
            yield _event("ping", {"type": "ping"})
            sent = ""
            out = first
            while True:
                o = out.outputs[0]
                delta = text_delta(sent, o.text)
                if delta:
                    yield _event(
                        "content_block_delta",
                        {
                            "type": "content_block_delta",
                            "index": 0,
                            "delta": {"type": "text_delta", "text": delta},
                        },
                    )
                    sent += delta
                if out.finished:
                    break
                out = await agen.__anext__()
                timing.observe(out)
            finished = True
            o = out.outputs[0]
            reason, seq = stop_fields(o)
            note(request, finish=reason)
            yield _event("content_block_stop", {"type": "content_block_stop", "index": 0})
            final_usage = usage_body(out)
            final_usage.pop("service_tier", None)
            yield _event(
                "message_delta",
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": reason, "stop_sequence": seq},
                    "usage": final_usage,
                },
            )
            yield _event("message_stop", {"type": "message_stop"})
        finally:
            if not finished:
                note(request, finish="client_disconnected")
            await agen.aclose()

    return ClosingStreamingResponse(
        events(),
        media_type="text/event-stream",
        headers={**SSE_HEADERS, "request-id": getattr(request.state, "request_id", mid)},
    )
