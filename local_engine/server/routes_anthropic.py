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
from collections.abc import AsyncGenerator
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from .diagnostics import Fingerprint
from .emulation import CacheRequest, anthropic_breakpoints, anthropic_usage_body, request_mode
from .errors import APIError, parse_body
from .generation import SSE_HEADERS, make_sampling_params, note, request_salt, text_delta
from .openapi import request_body
from .pipeline import Endpoint, Generation, run_endpoint
from .protocol_anthropic import (
    CountTokensRequest,
    MessagesRequest,
    check_message_order,
    check_tool_choice,
    forced_tools,
    invalidating_settings,
    messages_to_turns,
)
from .rendering import RenderedPrompt, RenderError, render_chat
from .state import ServerState, new_id
from .structured_output import ToolCallText, ToolSpec, forced_tool_call, parse_tool_call
from .system_messages import check_system_messages

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


def content_blocks(o: Any, forced: bool) -> tuple[list[dict], bool]:
    """The ``content`` of one sample and whether it is a tool call: with a forced tool
    choice, one ``tool_use`` block (text when ``max_tokens`` cut the call short)."""
    call = parse_tool_call(o.text) if forced else None
    if call is None:
        return [{"type": "text", "text": o.text}], False
    name, args = call
    return [{"type": "tool_use", "id": new_id("toolu_"), "name": name, "input": args}], True


def stop_fields(o: Any) -> tuple[str, str | None]:
    """(stop_reason, stop_sequence) of a finished sample."""
    if o.finish_reason == "length":
        return "max_tokens", None
    if isinstance(getattr(o, "stop_reason", None), str):
        return "stop_sequence", o.stop_reason
    return "end_turn", None


@router.post("/v1/messages/count_tokens", openapi_extra=request_body(CountTokensRequest))
async def count_tokens(request: Request) -> Response:
    """``POST /v1/messages/count_tokens``: Anthropic token counting, ``{"input_tokens": n}``
    for the prompt a Messages request with these fields would have."""
    st: ServerState = request.app.state.server
    req = parse_body(CountTokensRequest, await request.body())
    check_system_messages(req)
    check_message_order(req)
    check_tool_choice(req, generating=False)
    rendered = _render(st, req)
    return JSONResponse({"input_tokens": rendered.num_tokens})


class Messages(Endpoint):
    """``POST /v1/messages``: Anthropic Messages API, a ``message`` object or, with
    ``stream``, the documented server-sent event sequence (see the module docstring)."""

    body_model = MessagesRequest
    api = "anthropic"
    id_prefix = "msg_"

    def check(self, req: MessagesRequest) -> None:
        check_system_messages(req)
        check_message_order(req)
        check_tool_choice(req)

    def render(self, st: ServerState, req: MessagesRequest) -> list[RenderedPrompt]:
        return [_render(st, req)]

    def cache_request(
        self, st: ServerState, request: Request, req: MessagesRequest, rendered: RenderedPrompt
    ) -> CacheRequest:
        ends = rendered.message_ends
        last_user = max(
            (i for i, m in enumerate(req.messages) if m.role == "user" and i < len(ends)),
            default=None,
        )
        return CacheRequest(
            model=req.model,
            rendered=rendered,
            salt=request_salt(request, req.cache_salt),
            anthropic_breakpoints=anthropic_breakpoints(rendered),
            implicit_end=ends[last_user] if last_user is not None else None,
            mode=request_mode(request.headers),
            provider="anthropic",
            changes=invalidating_settings(req),
        )

    def prepare(
        self, st: ServerState, req: MessagesRequest, raw: bytes, rendered: list[RenderedPrompt]
    ) -> tuple[Fingerprint, dict | None] | None:
        """With ``diagnostics``: this request's fingerprint and the diff against the previous
        message's (None without)."""
        if req.diagnostics is None:
            return None
        fp = Fingerprint.of(json.loads(raw), rendered[0])
        return fp, st.diagnostics.diagnose(req.diagnostics.previous_message_id, fp)

    def sampling_params(self, req: MessagesRequest) -> Any:
        forced = forced_tools(req)
        spec = (
            None
            if forced is None
            else forced_tool_call([ToolSpec(n, p) for n, p in forced], param="tool_choice")
        )
        return make_sampling_params(
            structured=spec,
            temperature=req.temperature,
            top_p=req.top_p,
            top_k=req.top_k,
            max_tokens=req.max_tokens,
            stop=req.stop_sequences,
        )

    def on_started(self, gen: Generation) -> None:
        if gen.extra is not None:
            gen.st.diagnostics.put(gen.rid, gen.extra[0])

    @staticmethod
    def _message(gen: Generation) -> dict:
        return {"id": gen.rid, "type": "message", "role": "assistant", "model": gen.req.model}

    @staticmethod
    def _request_id(gen: Generation) -> str:
        return getattr(gen.request.state, "request_id", gen.rid)

    def response(self, gen: Generation, finals: list[Any]) -> Response:
        final = finals[0]
        o = final.outputs[0]
        reason, seq = stop_fields(o)
        content, is_call = content_blocks(o, forced_tools(gen.req) is not None)
        if is_call:
            reason, seq = "tool_use", None
        note(gen.request, finish=reason)
        usage = gen.record_usage(len(o.token_ids))
        body = {
            **self._message(gen),
            "content": content,
            "stop_reason": reason,
            "stop_sequence": seq,
            "usage": anthropic_usage_body(usage, len(o.token_ids), gen.tiers),
        }
        if gen.extra is not None:
            body["diagnostics"] = gen.extra[1]
        return JSONResponse(body, headers={"request-id": self._request_id(gen)})

    def stream_headers(self, gen: Generation) -> dict[str, str]:
        return {**SSE_HEADERS, "request-id": self._request_id(gen)}

    async def events(self, gen: Generation) -> AsyncGenerator[str, None]:
        agen, first = gen.started[0]
        start = {
            **self._message(gen),
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": anthropic_usage_body(gen.usages[0], 1, gen.tiers),
        }
        if gen.extra is not None:
            start["diagnostics"] = gen.extra[1]
        yield _event("message_start", {"type": "message_start", "message": start})
        if forced_tools(gen.req) is not None:
            async for e in self._tool_events(gen, agen, first):
                yield e
            return
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
            gen.timing.observe(out)
        gen.finished = True
        o = out.outputs[0]
        reason, seq = stop_fields(o)
        note(gen.request, finish=reason)
        yield _event("content_block_stop", {"type": "content_block_stop", "index": 0})
        final_usage = anthropic_usage_body(
            gen.record_usage(len(o.token_ids)), len(o.token_ids), gen.tiers
        )
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

    async def _tool_events(self, gen: Generation, agen: Any, first: Any):
        """A forced call as it is generated, as Anthropic streams tool use:
        ``content_block_start`` of a ``tool_use`` block (``input: {}``) once the name is
        complete, an ``input_json_delta`` (``partial_json``) per piece of the input,
        ``content_block_stop``, then ``message_delta`` (``stop_reason: "tool_use"``, or
        ``"max_tokens"`` when the limit cut the input short) and ``message_stop``. An output
        that ended before the name was complete is sent as a text block."""
        call, out = ToolCallText(), first
        while True:
            name, piece = call.feed(out.outputs[0].text, out.finished)
            if name is not None:
                block = {"type": "tool_use", "id": new_id("toolu_"), "name": name, "input": {}}
                yield _event(
                    "content_block_start",
                    {"type": "content_block_start", "index": 0, "content_block": block},
                )
            if piece:
                delta = {"type": "input_json_delta", "partial_json": piece}
                yield _event(
                    "content_block_delta",
                    {"type": "content_block_delta", "index": 0, "delta": delta},
                )
            if out.finished:
                break
            out = await agen.__anext__()
            gen.timing.observe(out)
        gen.finished = True
        o = out.outputs[0]
        reason, seq = stop_fields(o)
        if call.complete:
            reason, seq = "tool_use", None
        if call.name is None:
            yield _event(
                "content_block_start",
                {
                    "type": "content_block_start",
                    "index": 0,
                    "content_block": {"type": "text", "text": ""},
                },
            )
            delta = {"type": "text_delta", "text": o.text}
            yield _event(
                "content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta}
            )
        note(gen.request, finish=reason)
        yield _event("content_block_stop", {"type": "content_block_stop", "index": 0})
        usage = anthropic_usage_body(
            gen.record_usage(len(o.token_ids)), len(o.token_ids), gen.tiers
        )
        usage.pop("service_tier", None)
        yield _event(
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": reason, "stop_sequence": seq},
                "usage": usage,
            },
        )
        yield _event("message_stop", {"type": "message_stop"})


MESSAGES = Messages()


@router.post("/v1/messages", openapi_extra=request_body(MessagesRequest))
async def messages(request: Request) -> Response:
    """Anthropic Messages: a ``message`` object or, with ``stream``, the documented
    server-sent event sequence (``message_start`` ... ``message_stop``)."""
    return await run_endpoint(MESSAGES, request)
