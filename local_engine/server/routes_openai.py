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
import time
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from .emulation import (
    CacheRequest,
    anthropic_breakpoints,
    openai_breakpoints,
    openai_usage_body,
    request_mode,
)
from .errors import APIError, parse_body
from .generation import (
    SSE_HEADERS,
    ClientGone,
    ClosingStreamingResponse,
    Timing,
    chat_logprobs,
    collect,
    completion_logprobs,
    make_sampling_params,
    note,
    note_prompt,
    request_salt,
    start_request,
    text_delta,
)
from .protocol_openai import (
    ChatCompletionRequest,
    CompletionRequest,
    chat_to_turns,
    check_message_order,
    check_tool_choice,
)
from .rendering import RenderedPrompt, RenderError, render_chat, render_text, render_token_ids
from .state import ServerState, new_id

router = APIRouter()

FINISH = {"stop": "stop", "length": "length", "abort": "stop", None: None}


def _sse(obj: Any) -> str:
    return "data: " + json.dumps(obj, separators=(",", ":"), ensure_ascii=False) + "\n\n"


def _state(request: Request) -> ServerState:
    return request.app.state.server


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
    st: ServerState,
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


def _report_writes(st: ServerState, creq: CacheRequest) -> bool:
    return (creq.mode or st.emulator.mode) != "automatic"


# ---------------------------------------------------------------------------- chat


@router.post("/v1/chat/completions")
async def chat_completions(request: Request):
    """``POST /v1/chat/completions``: OpenAI Chat Completions, a ``chat.completion`` object
    or, with ``stream``, ``chat.completion.chunk`` server-sent events ending ``[DONE]``."""
    st = _state(request)
    req = parse_body(ChatCompletionRequest, await request.body())
    check_message_order(req)
    check_tool_choice(req)
    try:
        tools, system, turns = chat_to_turns(req)
        rendered = render_chat(st.tokenizer, tools=tools, system=system, turns=turns)
    except RenderError as exc:
        # the message starts with the field's path ("messages.0.content.1.type: ..."): it is the param
        path = re.match(r"(messages(?:\.\w+)*): ", str(exc))
        raise APIError(400, str(exc), param=path.group(1) if path else "messages") from None
    leading_system = bool(system) or req.messages[0].role in ("system", "developer")
    creq = _cache_request(
        st,
        request,
        req.model,
        rendered,
        body_salt=req.cache_salt,
        prompt_cache_key=req.prompt_cache_key,
        retention=req.prompt_cache_retention,
        options=req.prompt_cache_options,
        implicit_end=_implicit_end(req, rendered, leading_system),
    )
    st.emulator.validate(creq, api="openai")
    top = req.top_logprobs or 0
    params = make_sampling_params(
        temperature=req.temperature,
        top_p=req.top_p,
        seed=req.seed,
        max_tokens=req.output_limit,
        stop=req.stop,
        n=req.n,
        logprobs=top if req.logprobs else None,
    )
    rid = new_id("chatcmpl-")
    arrival = getattr(request.state, "arrival", time.monotonic())
    timing = Timing(st, arrival)
    note(request, id=rid, model=req.model, stream=bool(req.stream))
    note_prompt(request, st, rendered.token_ids)
    agen, first = await start_request(st, rid, rendered.token_ids, params, creq.salt)
    try:
        usage = st.emulator.usage(creq, first.num_cached_tokens)
    except BaseException:
        await agen.aclose()
        raise
    timing.observe(first)
    created = int(time.time())
    tok = st.tokenizer

    def usage_body(out: Any) -> dict:
        completion = sum(len(o.token_ids) for o in out.outputs)
        body = openai_usage_body(usage, completion, report_writes=_report_writes(st, creq))
        note(
            request,
            prompt_tokens=usage.prompt_tokens,
            cached_tokens=usage.cache_read_tokens,
            cache_write_tokens=usage.cache_write_total or None,
            output_tokens=completion,
            ttft_ms=None if timing.ttft is None else round(timing.ttft * 1000, 1),
        )
        st.metrics.prompt_tokens.inc(usage.prompt_tokens)
        st.metrics.cached_tokens.inc(usage.cache_read_tokens)
        st.metrics.write_tokens.inc(usage.cache_write_total)
        st.metrics.output_tokens.inc(completion)
        return body

    if not req.stream:
        try:
            final = await collect(request, agen, first, timing)
        except ClientGone:
            note(request, finish="client_disconnected")
            return JSONResponse({}, status_code=499)
        choices = []
        for o in final.outputs:
            choices.append(
                {
                    "index": o.index,
                    "message": {"role": "assistant", "content": o.text, "refusal": None},
                    "logprobs": (
                        {
                            "content": chat_logprobs(tok, o.token_ids, o.logprobs, top),
                            "refusal": None,
                        }
                        if req.logprobs
                        else None
                    ),
                    "finish_reason": FINISH.get(o.finish_reason, "stop"),
                }
            )
        note(request, finish=",".join(str(o.finish_reason) for o in final.outputs))
        return JSONResponse(
            {
                "id": rid,
                "object": "chat.completion",
                "created": created,
                "model": req.model,
                "choices": choices,
                "usage": usage_body(final),
                "system_fingerprint": None,
                "service_tier": "default",
            }
        )

    include_usage = bool(req.stream_options and req.stream_options.include_usage)

    async def events() -> AsyncIterator[str]:
        base = {
            "id": rid,
            "object": "chat.completion.chunk",
            "created": created,
            "model": req.model,
            "system_fingerprint": None,
        }
        extra = {"usage": None} if include_usage else {}
        sent_text = {o.index: "" for o in first.outputs}
        sent_tokens = {o.index: 0 for o in first.outputs}
        done: set[int] = set()
        finished = False
        try:
            for o in first.outputs:
                yield _sse(
                    {
                        **base,
                        "choices": [
                            {
                                "index": o.index,
                                "delta": {"role": "assistant", "content": ""},
                                "logprobs": None,
                                "finish_reason": None,
                            }
                        ],
                        **extra,
                    }
                )
            out = first
            while True:
                for o in out.outputs:
                    if o.index in done:
                        continue
                    delta = text_delta(sent_text[o.index], o.text)
                    new_ids = o.token_ids[sent_tokens[o.index] :]
                    lp = None
                    if req.logprobs and new_ids:
                        lps = (o.logprobs or [])[sent_tokens[o.index] :]
                        lp = {"content": chat_logprobs(tok, new_ids, lps, top), "refusal": None}
                    if delta or lp:
                        yield _sse(
                            {
                                **base,
                                "choices": [
                                    {
                                        "index": o.index,
                                        "delta": {"content": delta},
                                        "logprobs": lp,
                                        "finish_reason": None,
                                    }
                                ],
                                **extra,
                            }
                        )
                    sent_text[o.index] = (
                        o.text
                        if o.text.startswith(sent_text[o.index])
                        else sent_text[o.index] + delta
                    )
                    sent_tokens[o.index] = len(o.token_ids)
                    if o.finish_reason is not None:
                        done.add(o.index)
                        yield _sse(
                            {
                                **base,
                                "choices": [
                                    {
                                        "index": o.index,
                                        "delta": {},
                                        "logprobs": None,
                                        "finish_reason": FINISH.get(o.finish_reason, "stop"),
                                    }
                                ],
                                **extra,
                            }
                        )
                if out.finished:
                    break
                out = await agen.__anext__()
                timing.observe(out)
            finished = True
            body = usage_body(out)
            note(request, finish=",".join(str(o.finish_reason) for o in out.outputs))
            if include_usage:
                yield _sse({**base, "choices": [], "usage": body})
            yield "data: [DONE]\n\n"
        finally:
            if not finished:
                note(request, finish="client_disconnected")
            await agen.aclose()

    return ClosingStreamingResponse(events(), media_type="text/event-stream", headers=SSE_HEADERS)


# ---------------------------------------------------------------------------- completions


async def _merge(agens: list[tuple[int, AsyncIterator[Any]]]) -> AsyncIterator[tuple[int, Any]]:
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


@router.post("/v1/completions")
async def completions(request: Request):
    """``POST /v1/completions``: OpenAI legacy Completions, a ``text_completion`` object (one
    choice per prompt and sample) or, with ``stream``, its server-sent events."""
    st = _state(request)
    req = parse_body(CompletionRequest, await request.body())
    tok = st.tokenizer
    rendered_list: list[RenderedPrompt] = []
    texts: list[str] = []
    for p in req.prompts():
        if isinstance(p, str):
            rendered_list.append(render_text(tok, p))
            texts.append(p)
        else:
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
            texts.append(tok.decode(p, skip_special_tokens=False))
    if any(r.num_tokens == 0 for r in rendered_list):
        raise APIError(400, "prompt is empty; send at least one token", param="prompt")
    creqs = [
        _cache_request(
            st,
            request,
            req.model,
            r,
            body_salt=req.cache_salt,
            prompt_cache_key=req.prompt_cache_key,
            retention=req.prompt_cache_retention,
            implicit_end=r.num_tokens,
        )
        for r in rendered_list
    ]
    for c in creqs:
        st.emulator.validate(c, api="openai")
    top = req.logprobs or 0
    params = make_sampling_params(
        temperature=req.temperature,
        top_p=req.top_p,
        seed=req.seed,
        max_tokens=req.max_tokens,
        stop=req.stop,
        n=req.n,
        logprobs=req.logprobs,
    )
    cid = new_id("cmpl-")
    arrival = getattr(request.state, "arrival", time.monotonic())
    timing = Timing(st, arrival)
    note(request, id=cid, model=req.model, stream=bool(req.stream))
    note_prompt(request, st, rendered_list[0].token_ids)
    started: list[tuple[int, AsyncIterator[Any], Any]] = []
    try:
        for k, r in enumerate(rendered_list):
            agen, first = await start_request(st, f"{cid}-{k}", r.token_ids, params, creqs[k].salt)
            started.append((k, agen, first))
        usages = [st.emulator.usage(creqs[k], first.num_cached_tokens) for k, _, first in started]
    except BaseException:
        for _, agen, _ in started:
            await agen.aclose()
        raise
    created = int(time.time())
    n = req.n

    def usage_total(finals: dict[int, Any]) -> dict:
        from promptcache.cache_emulation import CacheUsage

        agg = CacheUsage(
            sum(u.prompt_tokens for u in usages),
            sum(u.cache_read_tokens for u in usages),
            {"total": sum(u.cache_write_total for u in usages)}
            if any(u.cache_write_total for u in usages)
            else {},
            sum(u.uncached_tokens for u in usages),
            writes_reported=all(u.writes_reported for u in usages),
        )
        completion = sum(len(o.token_ids) for f in finals.values() for o in f.outputs)
        note(
            request,
            prompt_tokens=agg.prompt_tokens,
            cached_tokens=agg.cache_read_tokens,
            cache_write_tokens=agg.cache_write_total or None,
            output_tokens=completion,
            ttft_ms=None if timing.ttft is None else round(timing.ttft * 1000, 1),
        )
        st.metrics.prompt_tokens.inc(agg.prompt_tokens)
        st.metrics.cached_tokens.inc(agg.cache_read_tokens)
        st.metrics.write_tokens.inc(agg.cache_write_total)
        st.metrics.output_tokens.inc(completion)
        return openai_usage_body(agg, completion, report_writes=_report_writes(st, creqs[0]))

    for _, _, first in started:
        timing.observe(first)

    if not req.stream:
        finals: dict[int, Any] = {}
        try:
            for k, agen, first in started:
                finals[k] = await collect(request, agen, first, timing)
        except ClientGone:
            note(request, finish="client_disconnected")
            return JSONResponse({}, status_code=499)
        finally:
            for _, agen, _ in started:
                await agen.aclose()
        choices = []
        for k in range(len(started)):
            for o in finals[k].outputs:
                text = (texts[k] + o.text) if req.echo else o.text
                choices.append(
                    {
                        "index": k * n + o.index,
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
                "id": cid,
                "object": "text_completion",
                "created": created,
                "model": req.model,
                "choices": choices,
                "usage": usage_total(finals),
                "system_fingerprint": None,
            }
        )

    include_usage = bool(req.stream_options and req.stream_options.include_usage)

    async def rest(agen, first):
        yield first
        if not first.finished:
            async for out in agen:
                timing.observe(out)
                yield out

    async def events() -> AsyncIterator[str]:
        base = {
            "id": cid,
            "object": "text_completion",
            "created": created,
            "model": req.model,
            "system_fingerprint": None,
        }
        extra = {"usage": None} if include_usage else {}
        sent_text: dict[tuple[int, int], str] = {}
        sent_tok: dict[tuple[int, int], int] = {}
        finals: dict[int, Any] = {}
        finished = False
        merged = _merge([(k, rest(agen, first)) for k, agen, first in started])
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
                        yield _sse(
                            {
                                **base,
                                "choices": [
                                    {
                                        "index": k * n + o.index,
                                        "text": delta,
                                        "logprobs": lp,
                                        "finish_reason": fin,
                                    }
                                ],
                                **extra,
                            }
                        )
                    sent_text[key] = o.text
                    sent_tok[key] = len(o.token_ids)
                if out.finished:
                    finals[k] = out
            finished = True
            body = usage_total(finals)
            if include_usage:
                yield _sse({**base, "choices": [], "usage": body})
            yield "data: [DONE]\n\n"
        finally:
            if not finished:
                note(request, finish="client_disconnected")
            await merged.aclose()
            for _, agen, _ in started:
                await agen.aclose()

    return ClosingStreamingResponse(events(), media_type="text/event-stream", headers=SSE_HEADERS)
