"""Bedrock Runtime routes: ``POST /model/{modelId}/converse``, ``/converse-stream`` (AWS
event-stream framing, :mod:`.eventstream`), ``/invoke`` and ``/invoke-with-response-stream``
(an Anthropic Messages body, as Anthropic models on Bedrock take it; the stream is one
event-stream ``chunk`` frame per Messages event, ``{"bytes": <base64 of the event's JSON>}``,
the ``ResponseStream`` shape of botocore's bedrock-runtime model, which boto3's
``invoke_model_with_response_stream`` and the ``anthropic`` SDK's ``AnthropicBedrock`` client
decode). boto3 with ``endpoint_url`` works: its SigV4 signatures are accepted, not checked.

Usage (https://docs.aws.amazon.com/bedrock/latest/userguide/prompt-caching.html, read
2026-12-03; its example response has ``inputTokens`` 20, ``cacheWriteInputTokens`` 1038,
``outputTokens`` 500 and ``totalTokens`` 1558): ``inputTokens`` counts the uncached input
only; ``totalTokens`` = input + output + cache read + cache write. Under the Bedrock rules
(default on these paths) the ``cachePoint`` breakpoints follow Anthropic's read/write rules
with Bedrock's per-checkpoint minimum (:mod:`.emulation_rules`).
"""

from __future__ import annotations

import base64
import time
from collections.abc import AsyncGenerator
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from .emulation import CacheRequest, anthropic_breakpoints, request_mode
from .errors import APIError
from .eventstream import encode_event
from .generation import make_sampling_params, note, request_salt, text_delta
from .pipeline import Endpoint, Generation, run_endpoint
from .protocol_anthropic import MessagesRequest, invalidating_settings
from .protocol_bedrock import ConverseRequest, forced_tools, stop_reason, to_turns
from .rendering import RenderedPrompt, RenderError, render_chat
from .routes_anthropic import Messages
from .state import ServerState, new_id
from .structured_output import ToolCallText, ToolSpec, forced_tool_call, parse_tool_call

router = APIRouter()
EVENTSTREAM = "application/vnd.amazon.eventstream"


def usage_body(gen: Generation, output_tokens: int) -> dict:
    """Converse ``usage`` (see the module docstring)."""
    u = gen.record_usage(output_tokens)
    return {
        "inputTokens": u.uncached_tokens,
        "outputTokens": output_tokens,
        "totalTokens": u.prompt_tokens + output_tokens,
        "cacheReadInputTokens": u.cache_read_tokens,
        "cacheWriteInputTokens": u.cache_write_total,
    }


class Converse(Endpoint):
    """``/model/{modelId}/converse`` and ``/converse-stream``."""

    body_model = ConverseRequest
    api = "bedrock"
    id_prefix = "tooluse_"

    def attach(self, request: Request, req: ConverseRequest) -> None:
        req.model = request.path_params["model_id"]
        req.stream = request.url.path.endswith("/converse-stream")

    def render(self, st: ServerState, req: ConverseRequest) -> list[RenderedPrompt]:
        tools, system, turns = to_turns(req)
        try:
            return [render_chat(st.tokenizer, tools=tools, system=system, turns=turns)]
        except RenderError as exc:
            raise APIError(400, str(exc)) from None

    def cache_request(
        self, st: ServerState, request: Request, req: ConverseRequest, r: RenderedPrompt
    ) -> CacheRequest:
        changes = {}
        choice = (req.toolConfig or {}).get("toolChoice")
        if choice is not None:
            changes["tool_choice"] = choice
        return CacheRequest(
            model=req.model,
            rendered=r,
            salt=request_salt(request, req.cacheSalt),
            anthropic_breakpoints=anthropic_breakpoints(r),
            mode=request_mode(request.headers),
            provider="bedrock",
            changes=changes,
        )

    def sampling_params(self, req: ConverseRequest) -> Any:
        cfg = req.inferenceConfig
        forced = forced_tools(req)
        spec = (
            None
            if forced is None
            else forced_tool_call([ToolSpec(n, p) for n, p in forced], param="toolChoice")
        )
        return make_sampling_params(
            temperature=cfg.temperature if cfg else None,
            top_p=cfg.topP if cfg else None,
            max_tokens=cfg.maxTokens if cfg else None,
            stop=cfg.stopSequences if cfg else None,
            structured=spec,
        )

    def _content(self, gen: Generation, o: Any) -> tuple[list[dict], bool]:
        call = parse_tool_call(o.text) if forced_tools(gen.req) is not None else None
        if call is None:
            return [{"text": o.text}], False
        block = {"toolUse": {"toolUseId": new_id("tooluse_"), "name": call[0], "input": call[1]}}
        return [block], True

    def response(self, gen: Generation, finals: list[Any]) -> Response:
        o = finals[0].outputs[0]
        content, is_call = self._content(gen, o)
        reason = stop_reason(o, is_call)
        note(gen.request, finish=reason)
        latency = int((time.monotonic() - gen.timing.arrival) * 1000)
        return JSONResponse(
            {
                "output": {"message": {"role": "assistant", "content": content}},
                "stopReason": reason,
                "usage": usage_body(gen, len(o.token_ids)),
                "metrics": {"latencyMs": latency},
            }
        )

    def stream_headers(self, gen: Generation) -> dict[str, str]:
        return {"x-amzn-RequestId": gen.rid}

    async def events(self, gen: Generation) -> AsyncGenerator[bytes, None]:  # type: ignore[override]
        agen, first = gen.started[0]
        call = ToolCallText() if forced_tools(gen.req) is not None else None
        yield encode_event("messageStart", {"role": "assistant"})
        sent = ""
        out = first
        # a text block has no contentBlockStart (ContentBlockStart is a union of toolUse
        # and other non-text starts: botocore refuses an empty one); a forced call streams
        # as Bedrock streams tool use: contentBlockStart with toolUseId and name once the
        # name is complete, then contentBlockDelta toolUse.input pieces of the input JSON
        while True:
            if call is not None:
                name, piece = call.feed(out.outputs[0].text, out.finished)
                if name is not None:
                    start = {"toolUse": {"toolUseId": new_id("tooluse_"), "name": name}}
                    yield encode_event(
                        "contentBlockStart", {"contentBlockIndex": 0, "start": start}
                    )
                if piece:
                    yield encode_event(
                        "contentBlockDelta",
                        {"contentBlockIndex": 0, "delta": {"toolUse": {"input": piece}}},
                    )
            else:
                delta = text_delta(sent, out.outputs[0].text)
                if delta:
                    sent += delta
                    yield encode_event(
                        "contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": delta}}
                    )
            if out.finished:
                break
            out = await agen.__anext__()
            gen.timing.observe(out)
        gen.finished = True
        o = out.outputs[0]
        if call is not None and call.name is None:  # ended before the name: text
            yield encode_event(
                "contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": o.text}}
            )
        yield encode_event("contentBlockStop", {"contentBlockIndex": 0})
        reason = stop_reason(o, call is not None and call.complete)
        note(gen.request, finish=reason)
        yield encode_event("messageStop", {"stopReason": reason})
        latency = int((time.monotonic() - gen.timing.arrival) * 1000)
        yield encode_event(
            "metadata",
            {"usage": usage_body(gen, len(o.token_ids)), "metrics": {"latencyMs": latency}},
        )


class InvokeRequest(MessagesRequest):
    """``/model/{modelId}/invoke`` body for Anthropic models: a Messages body with
    ``anthropic_version`` (``bedrock-2023-05-31``) and the model in the path."""

    model: str = ""
    anthropic_version: str | None = None


class Invoke(Messages):
    """``/model/{modelId}/invoke``: Anthropic Messages on Bedrock (Bedrock's cache rules)."""

    body_model = InvokeRequest
    api = "bedrock"

    def attach(self, request: Request, req: InvokeRequest) -> None:
        req.model = request.path_params["model_id"]
        req.stream = False

    def cache_request(
        self, st: ServerState, request: Request, req: Any, rendered: RenderedPrompt
    ) -> CacheRequest:
        creq = super().cache_request(st, request, req, rendered)
        creq.provider = "bedrock"
        creq.changes = invalidating_settings(req)
        return creq


class InvokeStream(Invoke):
    """``/model/{modelId}/invoke-with-response-stream``: the Messages stream of an Anthropic
    body, each event's JSON in an event-stream ``chunk`` frame (see the module docstring)."""

    def attach(self, request: Request, req: InvokeRequest) -> None:
        req.model = request.path_params["model_id"]
        req.stream = True

    def stream_headers(self, gen: Generation) -> dict[str, str]:
        return {"x-amzn-RequestId": gen.rid, "X-Amzn-Bedrock-Content-Type": "application/json"}

    async def events(self, gen: Generation) -> AsyncGenerator[bytes, None]:  # type: ignore[override]
        async for sse in super().events(gen):
            data = sse.split("\ndata: ", 1)[1].rstrip("\n")  # "event: X\ndata: {...}\n\n"
            yield encode_event("chunk", {"bytes": base64.b64encode(data.encode()).decode()})


CONVERSE = Converse()
INVOKE = Invoke()
INVOKE_STREAM = InvokeStream()


@router.post("/model/{model_id:path}/converse")
async def converse(request: Request) -> Response:
    """Bedrock Converse: ``{"output", "stopReason", "usage", "metrics"}``."""
    return await run_endpoint(CONVERSE, request)


@router.post("/model/{model_id:path}/converse-stream")
async def converse_stream(request: Request) -> Response:
    """Bedrock ConverseStream: event-stream frames ``messageStart`` ... ``metadata``."""
    resp = await run_endpoint(CONVERSE, request)
    resp.media_type = EVENTSTREAM
    resp.headers["content-type"] = EVENTSTREAM
    return resp


@router.post("/model/{model_id:path}/invoke")
async def invoke(request: Request) -> Response:
    """Bedrock InvokeModel with an Anthropic Messages body: a Messages ``message`` object."""
    return await run_endpoint(INVOKE, request)


@router.post("/model/{model_id:path}/invoke-with-response-stream")
async def invoke_with_response_stream(request: Request) -> Response:
    """Bedrock InvokeModelWithResponseStream with an Anthropic Messages body: event-stream
    ``chunk`` frames, each the JSON of one Messages stream event (``message_start`` ...
    ``message_stop``)."""
    resp = await run_endpoint(INVOKE_STREAM, request)
    if resp.media_type == "text/event-stream":  # a stream (an error is a JSON response)
        resp.media_type = EVENTSTREAM
        resp.headers["content-type"] = EVENTSTREAM
    return resp
