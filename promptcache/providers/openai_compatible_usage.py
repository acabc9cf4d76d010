"""Usage parsing for OpenAI-compatible servers (vLLM, SGLang, the local engine): the provider's usage report -> :class:`promptcache.Usage`.

Registered with :func:`promptcache.normalize_usage` in :mod:`promptcache.providers.usage`.
"""

from __future__ import annotations

from promptcache.errors import UsageError
from promptcache.providers.openai_usage import (
    last_usage_event,
    usage_and_model,
    usage_from_chat_fields,
    usage_from_responses_fields,
)
from promptcache.providers.usage_record import Usage, read_count, subpart

# OpenAI-compatible servers answer in the Chat Completions shape; whether they report
# cached tokens depends on the server (docs checked 2026-11):
# - vLLM: ``prompt_tokens_details.cached_tokens`` only with ``--enable-prompt-tokens-details``
#   (docs.vllm.ai, "OpenAI-compatible server");
# - SGLang: only with ``--enable-cache-report`` (docs.sglang.ai, server arguments);
# - the local engine (``promptcache serve``): always.
# A missing field therefore means UNKNOWN (``cache_reported=False``, hit_rate None), not a
# miss. DeepSeek (api-docs.deepseek.com "Context caching", checked 2026-11) reports
# ``prompt_cache_hit_tokens`` + ``prompt_cache_miss_tokens`` = ``prompt_tokens``.


def parse_usage(data: dict, *, provider: str = "openai_compatible") -> Usage:
    """Normalize a chat completion, a Responses API reply (``input_tokens``: the local
    engine and vLLM serve ``/v1/responses`` too) or a usage from an OpenAI-compatible server
    or DeepSeek."""
    usage, model = usage_and_model(data)
    if "prompt_tokens" not in usage and "input_tokens" in usage:
        return usage_from_responses_fields(usage, provider=provider, model=model)
    hit = read_count(usage, "prompt_cache_hit_tokens", where="usage")
    miss = read_count(usage, "prompt_cache_miss_tokens", where="usage")
    if hit is None and miss is None:
        return usage_from_chat_fields(usage, provider=provider, model=model)
    prompt = read_count(usage, "prompt_tokens", where="usage")
    hit, miss = hit or 0, miss or 0
    if prompt is not None and hit + miss != prompt:
        raise UsageError(
            f"inconsistent usage: prompt_cache_hit_tokens={hit} + "
            f"prompt_cache_miss_tokens={miss} != prompt_tokens={prompt}"
        )
    output = read_count(usage, "completion_tokens", where="usage") or 0
    reasoning = read_count(
        subpart(usage, "completion_tokens_details"),
        "reasoning_tokens",
        where="usage.completion_tokens_details",
    )
    return Usage(
        uncached_input_tokens=miss,
        cache_read_tokens=hit,
        output_tokens=output,
        reasoning_tokens=reasoning,
        provider=provider,
        model=model,
    )


def parse_usage_stream(events: list, *, provider: str = "openai_compatible") -> Usage:
    """Normalize a streamed chat completion (the final chunk carries the usage)."""
    return parse_usage(last_usage_event(events), provider=provider)
