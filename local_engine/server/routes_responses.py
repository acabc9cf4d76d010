"""OpenAI Responses API: ``POST /v1/responses`` (plain and streamed), ``GET`` and ``DELETE
/v1/responses/{id}``.

The request becomes the equivalent Chat Completions request
(:func:`~.protocol_responses.to_chat`) and runs through the Chat endpoint's rendering, cache
rules (OpenAI's: ``prompt_cache_key``, ``prompt_cache_retention``) and checks; the response
is a ``response`` object whose ``usage`` has ``input_tokens``, ``input_tokens_details.
cached_tokens``, ``output_tokens``, ``output_tokens_details.reasoning_tokens`` and
``total_tokens`` (https://platform.openai.com/docs/api-reference/responses/object, read
2026-12-03). Streaming sends the documented typed events (``response.created``,
``response.in_progress``, ``response.output_item.added``, ``response.content_part.added``,
``response.output_text.delta`` ..., ``response.completed``), each with a
``sequence_number``; a forced tool call streams a ``function_call`` item
(``response.function_call_arguments.delta`` / ``.done``).
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from .emulation import CACHE_TIERS_FIELD, CacheRequest
from .errors import APIError
from .generation import make_sampling_params, note, text_delta
from .openapi import request_body
from .pipeline import Endpoint, Generation, run_endpoint
from .protocol_openai import check_message_order, check_tool_choice, forced_tools
from .protocol_responses import ResponsesRequest, to_chat
from .rendering import RenderedPrompt
from .response_store import StoredResponse
from .routes_openai import CHAT_COMPLETIONS
from .state import ServerState, new_id
from .structured_output import (
    ToolCallText,
    ToolSpec,
    forced_tool_call,
    openai_format,
    split_tool_call,
)

router = APIRouter()


def _event(seq: list[int], kind: str, **fields: Any) -> str:
    seq[0] += 1
    data = {"type": kind, "sequence_number": seq[0] - 1, **fields}
    return f"event: {kind}\ndata: " + json.dumps(data, ensure_ascii=False) + "\n\n"


def usage_body(gen: Generation, output_tokens: int) -> dict:
    """Responses ``usage`` (plus ``cache_write_tokens`` where the emulated model reports
    writes, and this server's per-tier field)."""
    usage = gen.record_usage(output_tokens)
    details: dict[str, int] = {"cached_tokens": usage.cache_read_tokens}
    if gen.report_writes and usage.writes_reported:
        details["cache_write_tokens"] = usage.cache_write_total
    return {
        "input_tokens": usage.prompt_tokens,
        "input_tokens_details": details,
        "output_tokens": output_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": usage.prompt_tokens + output_tokens,
        CACHE_TIERS_FIELD: dict(gen.tiers),
    }


class Responses(Endpoint):
    """``POST /v1/responses``: a ``response`` object, or its typed server-sent events."""

    body_model = ResponsesRequest
    api = "openai"
    id_prefix = "resp_"

    def attach(self, request: Request, req: ResponsesRequest) -> None:
        if req.previous_response_id:
            prev = _stored(request, req.previous_response_id, "previous_response_id")
            req._history = [dict(m) for m in prev.conversation]

    def check(self, req: ResponsesRequest) -> None:
        req._chat = to_chat(req, req._history)
        check_message_order(req._chat)
        check_tool_choice(req._chat)

    def render(self, st: ServerState, req: ResponsesRequest) -> list[RenderedPrompt]:
        return CHAT_COMPLETIONS.render(st, req._chat)

    def cache_request(
        self, st: ServerState, request: Request, req: ResponsesRequest, rendered: RenderedPrompt
    ) -> CacheRequest:
        return CHAT_COMPLETIONS.cache_request(st, request, req._chat, rendered)

    def sampling_params(self, req: ResponsesRequest) -> Any:
        forced = forced_tools(req._chat)
        if forced is not None:
            spec = forced_tool_call([ToolSpec(n, p) for n, p in forced], param="tool_choice")
        else:
            spec = openai_format(req.text_format, param="text.format", flat=True)
        return make_sampling_params(
            temperature=req.temperature,
            top_p=req.top_p,
            max_tokens=req.max_output_tokens,
            structured=spec,
        )

    # ---- the response object ----------------------------------------------------------
    def _shell(self, gen: Generation, status: str) -> dict:
        req: ResponsesRequest = gen.req
        return {
            "id": gen.rid,
            "object": "response",
            "created_at": gen.created,
            "status": status,
            "error": None,
            "incomplete_details": None,
            "instructions": req.instructions,
            "max_output_tokens": req.max_output_tokens,
            "model": req.model,
            "output": [],
            "parallel_tool_calls": req.parallel_tool_calls is not False,
            "previous_response_id": req.previous_response_id,
            "prompt_cache_key": req.prompt_cache_key,
            "prompt_cache_retention": req.prompt_cache_retention,
            "store": req.store is not False,
            "temperature": 1.0 if req.temperature is None else req.temperature,
            "text": req.text or {"format": {"type": "text"}},
            "tool_choice": req.tool_choice if req.tool_choice is not None else "auto",
            "tools": req.tools or [],
            "top_p": 1.0 if req.top_p is None else req.top_p,
            "truncation": "disabled",
            "usage": None,
            "metadata": req.metadata or {},
            "user": req.user,
        }

    def _output_item(
        self, gen: Generation, o: Any, ids: tuple[str, str] | None = None
    ) -> tuple[dict, dict]:
        """The output item of the final sample and its Chat-shaped message (for the store):
        with a forced call, a ``function_call`` item (status ``incomplete``, its arguments
        cut short, when the token limit ended it inside them; a message when it ended before
        the name was complete). ``ids``: the call's item id and ``call_id`` when a stream
        announced them already."""
        call = split_tool_call(o.text) if forced_tools(gen.req._chat) is not None else None
        if call is not None and call.name is not None:
            item_id, call_id = ids or (new_id("fc_"), new_id("call_"))
            item: dict[str, Any] = {
                "type": "function_call",
                "id": item_id,
                "call_id": call_id,
                "name": call.name,
                "arguments": call.arguments,
                "status": "completed" if call.complete else "incomplete",
            }
            message = {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": call_id,
                        "type": "function",
                        "function": {"name": call.name, "arguments": call.arguments},
                    }
                ],
            }
            return item, message
        item = {
            "type": "message",
            "id": new_id("msg_"),
            "status": "completed",
            "role": "assistant",
            "content": [{"type": "output_text", "text": o.text, "annotations": [], "logprobs": []}],
        }
        return item, {"role": "assistant", "content": o.text}

    def _finish(self, gen: Generation, o: Any, ids: tuple[str, str] | None = None) -> dict:
        """The completed response body (stored when ``store``); ``ids`` as
        :meth:`_output_item`."""
        item, message = self._output_item(gen, o, ids)
        body = self._shell(gen, "completed")
        if o.finish_reason == "length" and (
            item["type"] == "message" or item["status"] == "incomplete"
        ):
            body["status"] = "incomplete"
            body["incomplete_details"] = {"reason": "max_output_tokens"}
            item["status"] = "incomplete"
        body["output"] = [item]
        body["usage"] = usage_body(gen, len(o.token_ids))
        note(gen.request, finish=o.finish_reason)
        req: ResponsesRequest = gen.req
        if req.store is not False:
            chat = req._chat.model_dump(exclude_none=True)["messages"]
            start = 1 if req.instructions else 0  # instructions are not carried over
            gen.st.responses.put(gen.rid, StoredResponse(body, chat[start:] + [message]))
        return body

    def response(self, gen: Generation, finals: list[Any]) -> Response:
        return JSONResponse(self._finish(gen, finals[0].outputs[0]))

    async def events(self, gen: Generation) -> AsyncGenerator[str, None]:
        seq = [0]
        agen, first = gen.started[0]
        shell = self._shell(gen, "in_progress")
        yield _event(seq, "response.created", response=shell)
        yield _event(seq, "response.in_progress", response=shell)
        forced = forced_tools(gen.req._chat) is not None
        out = first
        if forced:
            async for e in self._call_events(gen, seq, agen, first):
                yield e
            return
        item_id = new_id("msg_")
        item = {"id": item_id, "type": "message", "status": "in_progress", "role": "assistant"}
        yield _event(
            seq, "response.output_item.added", output_index=0, item={**item, "content": []}
        )
        part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
        where = {"item_id": item_id, "output_index": 0, "content_index": 0}
        yield _event(seq, "response.content_part.added", **where, part=part)
        sent = ""
        while True:
            delta = text_delta(sent, out.outputs[0].text)
            if delta:
                sent += delta
                yield _event(seq, "response.output_text.delta", **where, delta=delta, logprobs=[])
            if out.finished:
                break
            out = await agen.__anext__()
            gen.timing.observe(out)
        gen.finished = True
        body = self._finish(gen, out.outputs[0])
        final = {**body["output"][0], "id": item_id}
        body["output"] = [final]
        text = final["content"][0]["text"]
        yield _event(seq, "response.output_text.done", **where, text=text, logprobs=[])
        yield _event(seq, "response.content_part.done", **where, part=final["content"][0])
        yield _event(seq, "response.output_item.done", output_index=0, item=final)
        yield _event(seq, "response.completed", response=body)

    async def _call_events(
        self, gen: Generation, seq: list[int], agen: Any, first: Any
    ) -> AsyncGenerator[str, None]:
        """A forced call as it is generated, as OpenAI streams one: ``output_item.added``
        (a ``function_call`` item, empty ``arguments``) once the name is complete, a
        ``response.function_call_arguments.delta`` per piece of the arguments, then
        ``.done``, ``output_item.done`` and ``response.completed``. An output that ended
        before the name was complete is sent as a message item."""
        call, out = ToolCallText(), first
        item: dict[str, Any] = {}
        while True:
            name, piece = call.feed(out.outputs[0].text, out.finished)
            if name is not None:
                item = {
                    "type": "function_call",
                    "id": new_id("fc_"),
                    "call_id": new_id("call_"),
                    "name": name,
                    "arguments": "",
                    "status": "in_progress",
                }
                yield _event(seq, "response.output_item.added", output_index=0, item=item)
            where = {"item_id": item.get("id"), "output_index": 0}
            if piece:
                yield _event(seq, "response.function_call_arguments.delta", **where, delta=piece)
            if out.finished:
                break
            out = await agen.__anext__()
            gen.timing.observe(out)
        gen.finished = True
        ids = (item["id"], item["call_id"]) if item else None
        body = self._finish(gen, out.outputs[0], ids)
        final = body["output"][0]
        if final["type"] == "function_call":
            yield _event(
                seq,
                "response.function_call_arguments.done",
                **where,
                name=final["name"],
                arguments=final["arguments"],
            )
            yield _event(seq, "response.output_item.done", output_index=0, item=final)
        else:
            async for e in self._item_events(seq, final):
                yield e
        yield _event(seq, "response.completed", response=body)

    async def _item_events(self, seq: list[int], item: dict) -> AsyncGenerator[str, None]:
        """The events of one complete output item (a function call or a message)."""
        if item["type"] == "function_call":
            yield _event(
                seq,
                "response.output_item.added",
                output_index=0,
                item={**item, "arguments": "", "status": "in_progress"},
            )
            where = {"item_id": item["id"], "output_index": 0}
            yield _event(
                seq, "response.function_call_arguments.delta", **where, delta=item["arguments"]
            )
            yield _event(
                seq,
                "response.function_call_arguments.done",
                **where,
                name=item["name"],
                arguments=item["arguments"],
            )
        else:
            yield _event(
                seq,
                "response.output_item.added",
                output_index=0,
                item={**item, "content": [], "status": "in_progress"},
            )
            part = item["content"][0]
            where = {"item_id": item["id"], "output_index": 0, "content_index": 0}
            yield _event(seq, "response.content_part.added", **where, part={**part, "text": ""})
            yield _event(
                seq, "response.output_text.delta", **where, delta=part["text"], logprobs=[]
            )
            yield _event(seq, "response.output_text.done", **where, text=part["text"], logprobs=[])
            yield _event(seq, "response.content_part.done", **where, part=part)
        yield _event(seq, "response.output_item.done", output_index=0, item=item)


RESPONSES = Responses()


def _stored(request: Request, response_id: str, param: str = "response_id") -> StoredResponse:
    st: ServerState = request.app.state.server
    item = st.responses.get(response_id)
    if item is None:
        raise APIError(
            404 if param == "response_id" else 400,
            f"Response with id '{response_id}' not found."
            if param == "response_id"
            else f"Previous response with id '{response_id}' not found.",
            param=param,
        )
    return item


@router.post("/v1/responses", openapi_extra=request_body(ResponsesRequest))
async def create_response(request: Request) -> Response:
    """OpenAI Responses: a ``response`` object or, with ``stream``, its typed events."""
    return await run_endpoint(RESPONSES, request)


@router.get("/v1/responses/{response_id}")
async def get_response(request: Request, response_id: str) -> Response:
    """A stored response (404 when unknown, deleted or evicted)."""
    return JSONResponse(_stored(request, response_id).body)


@router.delete("/v1/responses/{response_id}")
async def delete_response(request: Request, response_id: str) -> Response:
    """Delete a stored response: ``{"id", "object": "response.deleted", "deleted": true}``."""
    st: ServerState = request.app.state.server
    if not st.responses.delete(response_id):
        _stored(request, response_id)  # raises the 404
    return JSONResponse({"id": response_id, "object": "response.deleted", "deleted": True})
