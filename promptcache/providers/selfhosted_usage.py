"""Usage parsing: selfhosted -- of self-hosted servers' own cache fields.

Each server reports prefix-cache reuse differently (sources read 2026-12-01):

============  ==================================================================  =========
server        what it reports                                                     source
============  ==================================================================  =========
vLLM          ``usage.prompt_tokens_details.cached_tokens`` only when started     [vllm]
              with ``--enable-prompt-tokens-details``; absent means unknown
SGLang        OpenAI API: ``usage.prompt_tokens_details.cached_tokens`` with      [sglang]
              ``--enable-cache-report``; native ``/generate``:
              ``meta_info.cached_tokens`` next to ``meta_info.prompt_tokens``
llama.cpp     ``timings.cache_n`` (prompt tokens reused from the slot's KV         [llamacpp]
              cache) and ``timings.prompt_n`` (prompt tokens processed, cache
              excluded) on ``/completion`` and on its OpenAI-compatible routes
              (next to ``usage``); newer builds also fill
              ``usage.prompt_tokens_details.cached_tokens``
Ollama        native ``/api/chat``, ``/api/generate``: ``prompt_eval_count``        [ollama]
              counts only the prompt tokens evaluated by this request (it is
              missing when the whole prompt came from the cache); the prompt
              length is not reported, so reads are known only when the caller
              passes ``prompt_tokens`` (e.g. from a tokenizer); cached tokens
              are not reported otherwise (ollama#8008 open)
TGI           OpenAI-compatible ``usage`` without cache details: not reported     [tgi]
============  ==================================================================  =========

[vllm] https://docs.vllm.ai/en/latest/serving/openai_compatible_server.html
(``--enable-prompt-tokens-details``). [sglang] sglang ``python/sglang/srt/server_args.py``
(``enable_cache_report``: "Return number of cached tokens in usage.prompt_tokens_details")
and ``srt/entrypoints/openai/usage_processor.py`` (``meta_info["cached_tokens"]``).
[llamacpp] llama.cpp ``tools/server/README.md`` and its web UI's ``ChatMessageTimings``
("prompt_n: number of prompt tokens processed (excluding cache)", "cache_n: number of
cached prompt tokens"). [ollama] https://github.com/ollama/ollama/blob/main/docs/api.md
(``prompt_eval_count``), issues #2068 and #3427 (missing when cached), #8008 (no cached
count). [tgi] https://huggingface.co/docs/text-generation-inference/messages_api.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from promptcache.errors import UsageError
from promptcache.providers.openai_compatible_usage import parse_usage as parse_chat
from promptcache.providers.usage_reconcile import reconcile_chat_usage
from promptcache.providers.usage_record import CACHE_NOT_REPORTED, Usage, read_count, subpart

__all__ = ["parse_usage", "parse_usage_stream", "SERVERS"]

SERVERS = ("vllm", "sglang", "llamacpp", "ollama", "tgi")


def _llamacpp(data: Mapping[str, Any], provider: str, model: str | None) -> Usage | None:
    timings = subpart(data, "timings")
    if timings is None or "cache_n" not in timings:
        return None
    cached = read_count(timings, "cache_n", where="timings", required=True) or 0
    processed = read_count(timings, "prompt_n", where="timings")
    usage = subpart(data, "usage")
    total = read_count(usage, "prompt_tokens", where="usage")
    if total is None:
        if processed is None:
            raise UsageError("llama.cpp timings have cache_n but no prompt_n and no usage")
        total = cached + processed
    if cached > total:
        raise UsageError(f"inconsistent usage: timings.cache_n={cached} > prompt_tokens={total}")
    output = read_count(usage, "completion_tokens", where="usage")
    if output is None:
        output = read_count(timings, "predicted_n", where="timings") or 0
    return Usage(
        uncached_input_tokens=total - cached,
        cache_read_tokens=cached,
        output_tokens=output,
        provider=provider,
        model=model,
    )


def _sglang_native(data: Mapping[str, Any], provider: str) -> Usage | None:
    meta = subpart(data, "meta_info")
    if meta is None or "prompt_tokens" not in meta:
        return None
    prompt = read_count(meta, "prompt_tokens", where="meta_info", required=True) or 0
    output = read_count(meta, "completion_tokens", where="meta_info") or 0
    cached = read_count(meta, "cached_tokens", where="meta_info")
    if cached is None:
        return Usage(
            uncached_input_tokens=prompt,
            output_tokens=output,
            cache_reported=False,
            provider=provider,
            flags=(CACHE_NOT_REPORTED,),
        )
    if cached > prompt:
        raise UsageError(f"inconsistent usage: meta_info.cached_tokens={cached} > {prompt}")
    return Usage(
        uncached_input_tokens=prompt - cached,
        cache_read_tokens=cached,
        output_tokens=output,
        provider=provider,
    )


def _ollama_native(
    data: Mapping[str, Any], provider: str, prompt_tokens: int | None
) -> Usage | None:
    if "prompt_eval_count" not in data and not ("eval_count" in data and "done" in data):
        return None
    evaluated = read_count(data, "prompt_eval_count", where="response")
    output = read_count(data, "eval_count", where="response") or 0
    model = data.get("model") if isinstance(data.get("model"), str) else None
    if prompt_tokens is None:
        return Usage(
            uncached_input_tokens=evaluated or 0,
            output_tokens=output,
            cache_reported=False,
            provider=provider,
            model=model,
            flags=(CACHE_NOT_REPORTED,),
        )
    evaluated = evaluated or 0  # missing: the whole prompt came from the cache
    if evaluated > prompt_tokens:
        raise UsageError(
            f"inconsistent usage: prompt_eval_count={evaluated} > prompt_tokens={prompt_tokens}"
        )
    return Usage(
        uncached_input_tokens=evaluated,
        cache_read_tokens=prompt_tokens - evaluated,
        output_tokens=output,
        provider=provider,
        model=model,
    )


def parse_usage(
    data: Mapping[str, Any],
    *,
    provider: str = "openai_compatible",
    prompt_tokens: int | None = None,
) -> Usage:
    """Normalize a self-hosted server's response (see the module table).

    ``prompt_tokens``: the prompt length in tokens when the caller knows it (needed for
    Ollama's native API, which reports only the tokens it evaluated).

    Raises :class:`UsageError` for a payload with no usage or inconsistent counts."""
    if not isinstance(data, Mapping):
        raise UsageError(f"a server response is a mapping, got {type(data).__name__}")
    if str(data.get("type", "")).startswith("response.") and isinstance(
        data.get("response"), Mapping
    ):
        data = data["response"]  # a Responses API stream's terminal event
    model = data.get("model") if isinstance(data.get("model"), str) else None
    for found in (
        _sglang_native(data, provider),
        _ollama_native(data, provider, prompt_tokens),
    ):
        if found is not None:
            return found
    usage = subpart(data, "usage")
    chat: Usage | None = None
    if usage is not None or "prompt_tokens" in data:
        chat = reconcile_chat_usage(data, parse_chat(dict(data), provider=provider))
        if chat.cache_reported:
            return chat
    timed = _llamacpp(data, provider, model)
    if timed is not None:
        return timed
    if chat is not None:
        return chat
    raise UsageError(
        "no usage found: expected an OpenAI-style usage, llama.cpp timings, SGLang "
        "meta_info or Ollama prompt_eval_count"
    )


def parse_usage_stream(
    events: Sequence[Any], *, provider: str = "openai_compatible", prompt_tokens: int | None = None
) -> Usage:
    """Normalize a stream: the last event carrying a usage, timings, meta_info or Ollama's
    final ``done`` object."""
    for ev in reversed(list(events)):
        if not isinstance(ev, Mapping):
            continue
        resp = ev.get("response")
        if (
            isinstance(ev.get("usage"), Mapping)
            or (isinstance(resp, Mapping) and isinstance(resp.get("usage"), Mapping))
            or isinstance(ev.get("timings"), Mapping)
            or isinstance(ev.get("meta_info"), Mapping)
            or ev.get("done") is True
        ):
            return parse_usage(ev, provider=provider, prompt_tokens=prompt_tokens)
    raise UsageError(
        "no event of this stream carries usage (for OpenAI-compatible servers pass "
        "stream_options={'include_usage': True})"
    )
