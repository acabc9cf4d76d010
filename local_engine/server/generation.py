"""Running one engine request for a route: start it (mapping engine errors to HTTP),
follow it to the end (aborting it when the client goes away), measure TTFT and
inter-token latency, and format logprobs."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncGenerator
from typing import Any

from starlette.requests import Request
from starlette.responses import StreamingResponse

from .errors import APIError
from .state import ServerState

#: how often a non-streaming request checks whether its client is still there, seconds
DISCONNECT_POLL_S = 0.25

SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


class ClientGone(Exception):
    """The client disconnected before the response was complete."""


def make_sampling_params(
    *,
    temperature: float | None,
    top_p: float | None,
    top_k: int | None = None,
    seed: int | None = None,
    max_tokens: int | None,
    stop: Any = None,
    n: int = 1,
    logprobs: int | None = None,
    structured: Any = None,
):
    """The engine's ``SamplingParams`` from API fields (None -> the API's default:
    temperature 1, top_p 1, all tokens, up to the context length); ``structured``: the
    output grammar (:mod:`.structured_output`)."""
    from local_engine.errors import EngineError
    from local_engine.sampling import SamplingParams

    try:
        return SamplingParams(
            temperature=1.0 if temperature is None else float(temperature),
            top_p=1.0 if top_p is None else float(top_p),
            top_k=-1 if not top_k else int(top_k),
            seed=seed,
            max_tokens=max_tokens,
            stop=stop,
            n=n,
            logprobs=logprobs,
            structured=structured,
        )
    except EngineError as exc:
        raise APIError(400, str(exc)) from None


def request_salt(request: Request, body_salt: str | None) -> str | None:
    """The tenant's cache salt: the ``cache_salt`` field, else the ``X-Cache-Salt``
    header, else None (shared cache)."""
    return body_salt or request.headers.get("x-cache-salt") or None


async def start_request(
    state: ServerState, request_id: str, token_ids: list[int], params: Any, salt: str | None
) -> tuple[AsyncGenerator[Any, None], Any]:
    """Submit a request and wait for its first output (after prefill).

    Returns (the output iterator, the first ``RequestOutput``). Raises :class:`APIError`:
    400 for a prompt longer than the context (the message names both lengths), a prompt plus
    ``max_tokens`` over the context (names the three numbers), or a request
    the engine refuses, 503 when the engine is stopped or shutting down."""
    from local_engine.async_engine import EngineDeadError, EngineStoppedError
    from local_engine.errors import EngineError, RequestTooLongError

    limit = state.max_model_len
    if (
        params.max_tokens is not None
        and len(token_ids) < limit < len(token_ids) + params.max_tokens
    ):
        # As vLLM and the hosted APIs do: refuse up front rather than run for minutes.
        raise APIError(
            400,
            f"This model's maximum context length is {limit} tokens. However, you "
            f"requested {len(token_ids) + params.max_tokens} tokens "
            f"({len(token_ids)} in the messages, {params.max_tokens} in the "
            f"completion). Please reduce the length of the messages or the "
            f"completion.",
            param="max_tokens",
            code="context_length_exceeded",
        )
    agen = state.engine.generate(request_id, token_ids, params, cache_salt=salt)
    try:
        first = await agen.__anext__()
    except RequestTooLongError as exc:
        await agen.aclose()
        raise APIError(400, str(exc), param="messages", code="context_length_exceeded") from None
    except EngineError as exc:
        await agen.aclose()
        raise APIError(400, str(exc)) from None
    except (EngineDeadError, EngineStoppedError) as exc:
        await agen.aclose()
        raise APIError(503, f"The engine is not accepting requests: {exc}") from None
    except BaseException:
        await agen.aclose()
        raise
    return agen, first


class Timing:
    """TTFT and inter-token latency of one request, observed into the server metrics."""

    def __init__(self, state: ServerState, arrival: float):
        self.state = state
        self.arrival = arrival
        self.first_token: float | None = None
        self.last: float | None = None
        self.tokens = 0

    def observe(self, out: Any) -> None:
        now = time.monotonic()
        total = sum(len(o.token_ids) for o in out.outputs)
        new = total - self.tokens
        if new <= 0:
            return
        if self.first_token is None:
            self.first_token = now
            self.state.metrics.ttft.observe(now - self.arrival)
            new -= 1
        elif self.last is not None and new > 0:
            gap = (now - self.last) / new
            for _ in range(min(new, 64)):
                self.state.metrics.itl.observe(gap)
        self.last = now
        self.tokens = total

    @property
    def ttft(self) -> float | None:
        return None if self.first_token is None else self.first_token - self.arrival


async def collect(
    request: Request, agen: AsyncGenerator[Any, None], first: Any, timing: Timing
) -> Any:
    """Follow a request to its last output, aborting it if the client disconnects
    (raises :class:`ClientGone`)."""
    last = first
    if first.finished:
        await agen.aclose()
        return first

    async def consume():
        nonlocal last
        async for out in agen:
            timing.observe(out)
            last = out

    task = asyncio.ensure_future(consume())
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=DISCONNECT_POLL_S)
            if done:
                task.result()
                return last
            if await request.is_disconnected():
                raise ClientGone()
    finally:
        if not task.done():
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
        await agen.aclose()


class ClosingStreamingResponse(StreamingResponse):
    """A StreamingResponse that always closes its body iterator (so the generator's
    ``finally`` runs and aborts the engine request even when the client disconnected)."""

    async def __call__(self, scope, receive, send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            aclose = getattr(self.body_iterator, "aclose", None)
            if aclose is not None:
                with contextlib.suppress(BaseException):
                    await aclose()


def token_text(tokenizer, token_id: int) -> str:
    """One token decoded alone (special tokens kept); U+FFFD where it holds part of a character
    (its bytes: ``Tokenizer.token_bytes``)."""
    return tokenizer.decode([token_id], skip_special_tokens=False)


def chat_logprobs(
    tokenizer, token_ids: list[int], logprobs: list[dict] | None, top: int
) -> list[dict]:
    """OpenAI chat ``logprobs.content`` entries for ``token_ids`` (natural-log probs)."""
    out = []
    for tid, lp in zip(token_ids, logprobs or []):
        t = token_text(tokenizer, tid)
        ranked = sorted(lp.items(), key=lambda kv: -kv[1])[:top]
        out.append(
            {
                "token": t,
                "logprob": float(lp.get(tid, ranked[0][1] if ranked else 0.0)),
                "bytes": list(tokenizer.token_bytes(tid)),  # a token may hold part of a character
                "top_logprobs": [
                    {
                        "token": token_text(tokenizer, k),
                        "logprob": float(v),
                        "bytes": list(tokenizer.token_bytes(k)),
                    }
                    for k, v in ranked
                ],
            }
        )
    return out


def completion_logprobs(
    tokenizer, token_ids: list[int], logprobs: list[dict] | None, top: int, text_offset: int = 0
) -> dict:
    """OpenAI legacy completions ``logprobs`` object."""
    tokens, token_lps, tops, offsets = [], [], [], []
    pos = text_offset
    for tid, lp in zip(token_ids, logprobs or []):
        t = token_text(tokenizer, tid)
        tokens.append(t)
        token_lps.append(float(lp.get(tid, 0.0)))
        ranked = sorted(lp.items(), key=lambda kv: -kv[1])[:top]
        tops.append({token_text(tokenizer, k): float(v) for k, v in ranked})
        offsets.append(pos)
        pos += len(t)
    return {
        "tokens": tokens,
        "token_logprobs": token_lps,
        "top_logprobs": tops,
        "text_offset": offsets,
    }


def text_delta(prev: str, cur: str) -> str:
    """The new text of a cumulative output (``cur`` normally extends ``prev``)."""
    if cur.startswith(prev):
        return cur[len(prev) :]
    k = 0
    for a, b in zip(prev, cur):
        if a != b:
            break
        k += 1
    return cur[k:] if len(cur) > len(prev) else ""


def note_prompt(request: Request, state: ServerState, token_ids: list[int]) -> None:
    """With ``--log-prompts``: add the prompt text (first 500 characters, JSON-quoted) to
    the request's log line. Off by default: prompts never reach the log."""
    if state.config.log_prompts:
        import json

        text = state.tokenizer.decode(token_ids[:2000], skip_special_tokens=False)
        note(request, prompt=json.dumps(text[:500], ensure_ascii=False))


def note(request: Request, **fields: Any) -> None:
    """Attach fields to the request's log line (see the app's logging middleware)."""
    info = getattr(request.state, "log", None)
    if info is None:
        info = {}
        request.state.log = info
    info.update({k: v for k, v in fields.items() if v is not None})
