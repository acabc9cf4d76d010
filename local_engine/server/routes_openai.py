"""OpenAI-compatible routes: ``/v1/chat/completions`` and ``/v1/completions``.

Plain and streaming (server-sent events; ``stream_options.include_usage`` adds a last
chunk with ``choices: []`` and the usage). Usage carries
``prompt_tokens_details.cached_tokens`` and, where the emulated provider reports writes,
``cache_write_tokens``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from .emulation import (
    CacheRequest,
    anthropic_breakpoints,
    openai_breakpoints,
    openai_usage_body,
    request_mode,
)
from .errors import APIError
from .generation import (
    chat_logprobs,
    completion_logprobs,
    make_sampling_params,
    note,
    request_salt,
    text_delta,
)
from .openapi import request_body
from .pipeline import Endpoint, Generation, run_endpoint
from .protocol_openai import (
    ChatCompletionRequest,
    CompletionRequest,
    chat_to_turns,
    check_message_order,
    check_tool_choice,
    forced_tools,
)
from .rendering import RenderedPrompt, RenderError, render_chat, render_text, render_token_ids
from .state import ServerState, new_id
from .structured_output import (
    ToolCallText,
    ToolSpec,
    forced_tool_call,
    openai_format,
    split_tool_call,
)

router = APIRouter()

FINISH = {"stop": "stop", "length": "length", "abort": "stop", None: None}


def _sse(obj: Any) -> str:
    return "data: " + json.dumps(obj, separators=(",", ":"), ensure_ascii=False) + "\n\n"


def _implicit_end(
    req: ChatCompletionRequest, rendered: RenderedPrompt, leading_system: bool
) -> int | None:
    """End offset of the latest user or tool message (GPT-5.6 implicit breakpoint)."""
    ends: dict[int, int] = {}
    k = 0
    for i, _m in enumerate(req.messages):
        if i == 0 and leading_system:
            ends[i] = rendered.system_end
            continue
        if k < len(rendered.message_ends):
            ends[i] = rendered.message_ends[k]
        k += 1
    for i in range(len(req.messages) - 1, -1, -1):
        if req.messages[i].role in ("user", "tool", "function") and i in ends:
            return ends[i]
    return None


def _cache_request(
    request: Request,
    model: str,
    rendered: RenderedPrompt,
    *,
    body_salt: str | None,
    prompt_cache_key: str | None,
    retention: str | None,
    options: Any = None,
    implicit_end: int | None = None,
) -> CacheRequest:
    ttl = (options.ttl if options is not None and options.ttl else None) or "30m"
    return CacheRequest(
        model=model,
        rendered=rendered,
        salt=request_salt(request, body_salt),
        anthropic_breakpoints=anthropic_breakpoints(rendered),
        openai_breakpoints=openai_breakpoints(rendered, ttl),
        openai_mode=options.mode if options is not None else None,
        openai_ttl=ttl,
        implicit_end=implicit_end,
        prompt_cache_key=prompt_cache_key,
        retention=retention,
        mode=request_mode(request.headers),
    )


# ---------------------------------------------------------------------------- chat


def _chat_message(o: Any, forced: bool) -> tuple[dict, str]:
    """The ``message`` and ``finish_reason`` of one sample: with a forced tool call, the
    call (``tool_calls``, finish ``"tool_calls"``; its arguments cut short with finish
    ``"length"`` when ``max_tokens`` ended it inside them, as OpenAI returns such a call;
    text when it ended before the name was complete). The arguments are the model's JSON
    text, as streamed."""
    call = split_tool_call(o.text) if forced else None
    if call is None or call.name is None:
        message = {"role": "assistant", "content": o.text, "refusal": None}
        return message, FINISH.get(o.finish_reason, "stop") or "stop"
    message = {
        "role": "assistant",
        "content": None,
        "refusal": None,
        "tool_calls": [
            {
                "id": new_id("call_"),
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments},
            }
        ],
    }
    return message, "tool_calls" if call.complete else FINISH.get(o.finish_reason) or "length"


def _tool_call_deltas(call: ToolCallText, o: Any) -> list[tuple[dict, str | None]]:
    """The ``(delta, finish_reason)`` chunks of a forced call's new output, as OpenAI
    streams a call: the first names it (``tool_calls[0]`` with ``id``, ``type``,
    ``function.name`` and empty ``arguments``), the next carry ``function.arguments``
    pieces, the last has the finish reason. An output that ended before the name was
    complete is sent as text (as :func:`_chat_message`)."""
    finished = o.finish_reason is not None
    name, piece = call.feed(o.text, finished)
    chunks: list[tuple[dict, str | None]] = []
    if name is not None:
        head = {"index": 0, "id": new_id("call_"), "type": "function"}
        chunks.append(
            ({"tool_calls": [{**head, "function": {"name": name, "arguments": ""}}]}, None)
        )
    if piece:
        chunks.append(({"tool_calls": [{"index": 0, "function": {"arguments": piece}}]}, None))
    if finished:
        if call.name is None:
            chunks.append(({"content": o.text}, None))
        chunks.append(({}, _chat_message(o, True)[1]))
    return chunks


class ChatCompletions(Endpoint):
    """``POST /v1/chat/completions``: OpenAI Chat Completions, a ``chat.completion`` object
    or, with ``stream``, ``chat.completion.chunk`` server-sent events ending ``[DONE]``."""

    body_model = ChatCompletionRequest
    api = "openai"
    id_prefix = "chatcmpl-"

    def check(self, req: ChatCompletionRequest) -> None:
        check_message_order(req)
        check_tool_choice(req)

    def render(self, st: ServerState, req: ChatCompletionRequest) -> list[RenderedPrompt]:
        try:
            tools, system, turns = chat_to_turns(req)
            return [render_chat(st.tokenizer, tools=tools, system=system, turns=turns)]
        except RenderError as exc:
            # the message starts with the field's path ("messages.0.content.1.type: ..."): it is the param
            path = re.match(r"(messages(?:\.\w+)*): ", str(exc))
            raise APIError(400, str(exc), param=path.group(1) if path else "messages") from None

    def cache_request(
        self,
        st: ServerState,
        request: Request,
        req: ChatCompletionRequest,
        rendered: RenderedPrompt,
    ) -> CacheRequest:
        # a leading system/developer message is the system turn (chat_to_turns)
        leading_system = req.messages[0].role in ("system", "developer")
        return _cache_request(
            request,
            req.model,
            rendered,
            body_salt=req.cache_salt,
            prompt_cache_key=req.prompt_cache_key,
            retention=req.prompt_cache_retention,
            options=req.prompt_cache_options,
            implicit_end=_implicit_end(req, rendered, leading_system),
        )

    def sampling_params(self, req: ChatCompletionRequest) -> Any:
        forced = forced_tools(req)
        if forced is not None:
            spec = forced_tool_call([ToolSpec(n, p) for n, p in forced], param="tool_choice")
        else:
            spec = openai_format(req.response_format, param="response_format")
        return make_sampling_params(
            structured=spec,
            temperature=req.temperature,
            top_p=req.top_p,
            seed=req.seed,
            max_tokens=req.output_limit,
            stop=req.stop,
            n=req.n,
            logprobs=(req.top_logprobs or 0) if req.logprobs else None,
        )

    def _usage_body(self, gen: Generation, out: Any) -> dict:
        completion = sum(len(o.token_ids) for o in out.outputs)
        usage = gen.record_usage(completion)
        return openai_usage_body(
            usage, completion, report_writes=gen.report_writes, tiers=gen.tiers
        )

    def response(self, gen: Generation, finals: list[Any]) -> Response:
        req: ChatCompletionRequest = gen.req
        tok = gen.st.tokenizer
        top = req.top_logprobs or 0
        final = finals[0]
        choices = []
        forced = forced_tools(req) is not None
        for o in final.outputs:
            message, finish = _chat_message(o, forced)
            choices.append(
                {
                    "index": o.index,
                    "message": message,
                    "logprobs": (
                        {
                            "content": chat_logprobs(tok, o.token_ids, o.logprobs, top),
                            "refusal": None,
                        }
                        if req.logprobs
                        else None
                    ),
                    "finish_reason": finish,
                }
            )
        note(gen.request, finish=",".join(str(o.finish_reason) for o in final.outputs))
        return JSONResponse(
            {
                "id": gen.rid,
                "object": "chat.completion",
                "created": gen.created,
                "model": req.model,
                "choices": choices,
                "usage": self._usage_body(gen, final),
                "system_fingerprint": None,
                "service_tier": "default",
            }
        )

    async def events(self, gen: Generation) -> AsyncGenerator[str, None]:
        req: ChatCompletionRequest = gen.req
        tok = gen.st.tokenizer
        top = req.top_logprobs or 0
        agen, first = gen.started[0]
        include_usage = bool(req.stream_options and req.stream_options.include_usage)
        base = {
            "id": gen.rid,
            "object": "chat.completion.chunk",
            "created": gen.created,
            "model": req.model,
            "system_fingerprint": None,
        }
        extra = {"usage": None} if include_usage else {}

        def chunk(index: int, delta: dict, logprobs: Any, finish_reason: str | None) -> str:
            choice = {
                "index": index,
                "delta": delta,
                "logprobs": logprobs,
                "finish_reason": finish_reason,
            }
            return _sse({**base, "choices": [choice], **extra})

        sent_text = {o.index: "" for o in first.outputs}
        sent_tokens = {o.index: 0 for o in first.outputs}
        done: set[int] = set()
        calls = {o.index: ToolCallText() for o in first.outputs} if forced_tools(req) else {}
        for o in first.outputs:
            role = {"role": "assistant", "content": None if calls else ""}
            yield chunk(o.index, role, None, None)
        out = first
        while True:
            for o in out.outputs:
                if o.index in done:
                    continue
                if calls:
                    for call_delta, finish in _tool_call_deltas(calls[o.index], o):
                        yield chunk(o.index, call_delta, None, finish)
                    if o.finish_reason is not None:
                        done.add(o.index)
                    continue
                delta = text_delta(sent_text[o.index], o.text)
                new_ids = o.token_ids[sent_tokens[o.index] :]
                lp = None
                if req.logprobs and new_ids:
                    lps = (o.logprobs or [])[sent_tokens[o.index] :]
                    lp = {"content": chat_logprobs(tok, new_ids, lps, top), "refusal": None}
                if delta or lp:
                    yield chunk(o.index, {"content": delta}, lp, None)
                sent_text[o.index] = (
                    o.text if o.text.startswith(sent_text[o.index]) else sent_text[o.index] + delta
                )
                sent_tokens[o.index] = len(o.token_ids)
                if o.finish_reason is not None:
                    done.add(o.index)
                    yield chunk(o.index, {}, None, FINISH.get(o.finish_reason, "stop"))
            if out.finished:
                break
            out = await agen.__anext__()
            gen.timing.observe(out)
        gen.finished = True
        body = self._usage_body(gen, out)
        note(gen.request, finish=",".join(str(o.finish_reason) for o in out.outputs))
        if include_usage:
            yield _sse({**base, "choices": [], "usage": body})
        yield "data: [DONE]\n\n"


CHAT_COMPLETIONS = ChatCompletions()


@router.post("/v1/chat/completions", openapi_extra=request_body(ChatCompletionRequest))
async def chat_completions(request: Request) -> Response:
    """OpenAI Chat Completions: a ``chat.completion`` object or, with ``stream``,
    ``chat.completion.chunk`` server-sent events ending ``data: [DONE]``."""
    return await run_endpoint(CHAT_COMPLETIONS, request)


# ---------------------------------------------------------------------------- completions


async def _merge(
    agens: list[tuple[int, AsyncIterator[Any]]],
) -> AsyncGenerator[tuple[int, Any], None]:
    """Interleave several request iterators: yields (prompt index, output)."""
    q: asyncio.Queue = asyncio.Queue()
    sentinel = object()

    async def pump(k, it):
        try:
            async for out in it:
                await q.put((k, out))
        except BaseException as exc:  # noqa: BLE001
            await q.put((k, exc))
        finally:
            await q.put((k, sentinel))

    tasks = [asyncio.ensure_future(pump(k, it)) for k, it in agens]
    live = len(tasks)
    try:
        while live:
            k, item = await q.get()
            if item is sentinel:
                live -= 1
            elif isinstance(item, BaseException):
                raise item
            else:
                yield k, item
    finally:
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(BaseException):
                await t


class Completions(Endpoint):
    """``POST /v1/completions``: OpenAI legacy Completions, a ``text_completion`` object (one
    choice per prompt and sample) or, with ``stream``, its server-sent events."""

    body_model = CompletionRequest
    api = "openai"
    id_prefix = "cmpl-"

    def render(self, st: ServerState, req: CompletionRequest) -> list[RenderedPrompt]:
        tok = st.tokenizer
        rendered_list: list[RenderedPrompt] = []
        for p in req.prompts():
            if isinstance(p, str):
                rendered_list.append(render_text(tok, p))
                continue
            if not all(isinstance(t, int) for t in p):
                raise APIError(
                    400, "prompt must be a string, a list of strings, or token ids", param="prompt"
                )
            bad = [t for t in p if not 0 <= t < tok.vocab_size]
            if bad:  # checked before decoding: the tokenizer cannot take a negative or huge id
                raise APIError(
                    400,
                    f"prompt token id {bad[0]} is out of range 0..{tok.vocab_size - 1}",
                    param="prompt",
                )
            rendered_list.append(render_token_ids(p))
        if any(r.num_tokens == 0 for r in rendered_list):
            raise APIError(400, "prompt is empty; send at least one token", param="prompt")
        return rendered_list

    def cache_request(
        self, st: ServerState, request: Request, req: CompletionRequest, rendered: RenderedPrompt
    ) -> CacheRequest:
        return _cache_request(
            request,
            req.model,
            rendered,
            body_salt=req.cache_salt,
            prompt_cache_key=req.prompt_cache_key,
            retention=req.prompt_cache_retention,
            implicit_end=rendered.num_tokens,
        )

    def prepare(
        self, st: ServerState, req: CompletionRequest, raw: bytes, rendered: list[RenderedPrompt]
    ) -> list[str]:
        """Each prompt's text (what ``echo`` prepends): token-id prompts decoded."""
        tok = st.tokenizer
        return [
            p if isinstance(p, str) else tok.decode(p, skip_special_tokens=False)
            for p in req.prompts()
        ]

    def sampling_params(self, req: CompletionRequest) -> Any:
        return make_sampling_params(
            temperature=req.temperature,
            top_p=req.top_p,
            seed=req.seed,
            max_tokens=req.max_tokens,
            stop=req.stop,
            n=req.n,
            logprobs=req.logprobs,
        )

    def engine_request_ids(self, rid: str, num_prompts: int) -> list[str]:
        return [f"{rid}-{k}" for k in range(num_prompts)]

    def _usage_body(self, gen: Generation, finals: list[Any]) -> dict:
        completion = sum(len(o.token_ids) for f in finals for o in f.outputs)
        usage = gen.record_usage(completion)
        return openai_usage_body(
            usage, completion, report_writes=gen.report_writes, tiers=gen.tiers
        )

    def response(self, gen: Generation, finals: list[Any]) -> Response:
        req: CompletionRequest = gen.req
        tok = gen.st.tokenizer
        texts: list[str] = gen.extra
        top = req.logprobs or 0
        choices = []
        for k, final in enumerate(finals):
            for o in final.outputs:
                text = (texts[k] + o.text) if req.echo else o.text
                choices.append(
                    {
                        "index": k * req.n + o.index,
                        "text": text,
                        "logprobs": (
                            completion_logprobs(
                                tok, o.token_ids, o.logprobs, top, len(texts[k]) if req.echo else 0
                            )
                            if req.logprobs is not None
                            else None
                        ),
                        "finish_reason": FINISH.get(o.finish_reason, "stop"),
                    }
                )
        return JSONResponse(
            {
                "id": gen.rid,
                "object": "text_completion",
                "created": gen.created,
                "model": req.model,
                "choices": choices,
                "usage": self._usage_body(gen, finals),
                "system_fingerprint": None,
            }
        )

    async def events(self, gen: Generation) -> AsyncGenerator[str, None]:
        req: CompletionRequest = gen.req
        tok = gen.st.tokenizer
        texts: list[str] = gen.extra
        top = req.logprobs or 0
        include_usage = bool(req.stream_options and req.stream_options.include_usage)

        async def rest(agen: AsyncIterator[Any], first: Any) -> AsyncGenerator[Any, None]:
            yield first
            if not first.finished:
                async for out in agen:
                    gen.timing.observe(out)
                    yield out

        base = {
            "id": gen.rid,
            "object": "text_completion",
            "created": gen.created,
            "model": req.model,
            "system_fingerprint": None,
        }
        extra = {"usage": None} if include_usage else {}
        sent_text: dict[tuple[int, int], str] = {}
        sent_tok: dict[tuple[int, int], int] = {}
        finals: dict[int, Any] = {}
        merged = _merge([(k, rest(agen, first)) for k, (agen, first) in enumerate(gen.started)])
        try:
            async for k, out in merged:
                for o in out.outputs:
                    key = (k, o.index)
                    prev = sent_text.get(key, "")
                    delta = text_delta(prev, o.text)
                    if req.echo and key not in sent_text:
                        delta = texts[k] + delta
                    new_ids = o.token_ids[sent_tok.get(key, 0) :]
                    lp = None
                    if req.logprobs is not None and new_ids:
                        lp = completion_logprobs(
                            tok, new_ids, (o.logprobs or [])[sent_tok.get(key, 0) :], top
                        )
                    fin = FINISH.get(o.finish_reason, "stop") if o.finish_reason else None
                    if delta or lp or fin:
                        choice = {
                            "index": k * req.n + o.index,
                            "text": delta,
                            "logprobs": lp,
                            "finish_reason": fin,
                        }
                        yield _sse({**base, "choices": [choice], **extra})
                    sent_text[key] = o.text
                    sent_tok[key] = len(o.token_ids)
                if out.finished:
                    finals[k] = out
            gen.finished = True
            body = self._usage_body(gen, list(finals.values()))
            if include_usage:
                yield _sse({**base, "choices": [], "usage": body})
            yield "data: [DONE]\n\n"
        finally:
            await merged.aclose()


COMPLETIONS = Completions()


@router.post("/v1/completions", openapi_extra=request_body(CompletionRequest))
async def completions(request: Request) -> Response:
    """OpenAI legacy Completions: a ``text_completion`` object (one choice per prompt and
    sample) or, with ``stream``, its server-sent events ending ``data: [DONE]``."""
    return await run_endpoint(COMPLETIONS, request)
