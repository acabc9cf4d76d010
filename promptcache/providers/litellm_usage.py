"""Usage parsing: litellm -- of LiteLLM responses (no request rendering:
LiteLLM takes OpenAI-shaped keyword arguments, see ``promptcache.providers.openai``).

LiteLLM answers every provider (Anthropic, OpenAI, Gemini/Vertex, Bedrock, ...) with its
``ModelResponse``, whose ``usage`` is a Chat Completions usage extended with the
provider's cache counts (litellm 1.110.2, ``litellm/types/utils.py``: ``Usage``,
``PromptTokensDetailsWrapper``; ``litellm/llms/anthropic/chat/transformation.py``:
``calculate_usage``; read 2026-12-01):

- ``prompt_tokens`` is the WHOLE prompt: for Anthropic LiteLLM adds
  ``cache_read_input_tokens`` and ``cache_creation_input_tokens`` to ``input_tokens``;
  for OpenAI, Gemini and Bedrock it is the provider's total already;
- reads: ``prompt_tokens_details.cached_tokens`` and, for Anthropic, Bedrock and
  DeepSeek, also ``cache_read_input_tokens`` at the top of ``usage``;
- writes: ``prompt_tokens_details.cache_write_tokens`` (mirrored as
  ``cache_creation_tokens``), ``cache_creation_input_tokens`` at the top, and the TTL split
  in ``prompt_tokens_details.cache_creation_token_details.ephemeral_5m_input_tokens`` /
  ``ephemeral_1h_input_tokens``;
- streamed (``stream=True`` with ``stream_options={"include_usage": True}``): the last
  chunk carries ``usage``; ``litellm.stream_chunk_builder(chunks)`` returns a
  ``ModelResponse`` like the unstreamed one. ``litellm.responses()`` returns a Responses
  API object (``input_tokens``), parsed as OpenAI's.

When the two vocabularies disagree, see :mod:`promptcache.providers.usage_reconcile`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from promptcache.errors import UsageError
from promptcache.providers.openai_usage import usage_from_responses_fields
from promptcache.providers.usage_reconcile import reconcile_chat_usage
from promptcache.providers.usage_record import Usage, read_count, subpart

__all__ = ["parse_usage", "parse_usage_stream"]

_TTL_KEYS = {
    "ephemeral_5m_input_tokens": "5m",
    "ephemeral_1h_input_tokens": "1h",
    "ephemeral_30m_input_tokens": "30m",
    "ephemeral_12h_input_tokens": "12h",
}


def _split(details: Mapping[str, Any] | None, written: int) -> dict[str, int]:
    split = subpart(details, "cache_creation_token_details")
    ttl: dict[str, int] = {}
    if split is not None:
        for key, label in _TTL_KEYS.items():
            n = read_count(
                split, key, where="usage.prompt_tokens_details.cache_creation_token_details"
            )
            if n:
                ttl[label] = n
    if sum(ttl.values()) != written:
        ttl = {"5m": written} if written else {}
    return ttl


def parse_usage(data: Mapping[str, Any], *, provider: str = "litellm") -> Usage:
    """Normalize a LiteLLM ``ModelResponse`` (as a plain dict), its ``usage``, or a
    Responses API response.

    Raises :class:`UsageError` when no usage is present or counts are inconsistent."""
    if not isinstance(data, Mapping):
        raise UsageError(f"a LiteLLM response is a mapping, got {type(data).__name__}")
    usage = subpart(data, "usage")
    model = data.get("model") if usage is not None else None
    if usage is None:
        if not any(k in data for k in ("prompt_tokens", "input_tokens")):
            raise UsageError(
                "no usage in this LiteLLM response; for a stream pass "
                "stream_options={'include_usage': True}"
            )
        usage = data
    if "prompt_tokens" not in usage and "input_tokens" in usage:
        return usage_from_responses_fields(dict(usage), provider=provider, model=model)
    prompt = read_count(usage, "prompt_tokens", where="usage", required=True) or 0
    output = read_count(usage, "completion_tokens", where="usage") or 0
    details = subpart(usage, "prompt_tokens_details")
    dw = "usage.prompt_tokens_details"
    read = read_count(details, "cached_tokens", where=dw)
    alt_read = read_count(usage, "cache_read_input_tokens", where="usage")
    write = read_count(details, "cache_write_tokens", "cache_creation_tokens", where=dw)
    alt_write = read_count(usage, "cache_creation_input_tokens", where="usage")
    reasoning = read_count(
        subpart(usage, "completion_tokens_details"),
        "reasoning_tokens",
        where="usage.completion_tokens_details",
    )
    if read is None and alt_read is None and write is None and alt_write is None:
        return Usage(
            uncached_input_tokens=prompt,
            output_tokens=output,
            cache_reported=False,
            reasoning_tokens=reasoning,
            provider=provider,
            model=model,
            flags=("cache_not_reported",),
        )
    reads, writes = read or 0, write or 0
    if reads + writes > prompt:
        raise UsageError(
            f"inconsistent usage: cached_tokens={reads} + cache writes={writes} are more "
            f"than prompt_tokens={prompt}"
        )
    base = Usage(
        uncached_input_tokens=prompt - reads - writes,
        cache_read_tokens=reads,
        cache_write_tokens=writes,
        cache_write_by_ttl=_split(details, writes),
        output_tokens=output,
        reasoning_tokens=reasoning,
        provider=provider,
        model=model,
    )
    result = reconcile_chat_usage(data, base)
    if result.cache_write_tokens != writes:  # the split follows the reconciled writes
        result = result.replace(cache_write_by_ttl=_split(details, result.cache_write_tokens))
    return result


def parse_usage_stream(events: Sequence[Any], *, provider: str = "litellm") -> Usage:
    """Normalize streamed LiteLLM chunks: the last chunk with a ``usage`` carries the
    totals (``stream_options={"include_usage": True}``).

    Raises :class:`UsageError` when no chunk has one."""
    for ev in reversed(list(events)):
        if isinstance(ev, Mapping) and isinstance(ev.get("usage"), Mapping):
            return parse_usage(ev, provider=provider)
    raise UsageError(
        "no chunk of this LiteLLM stream carries usage; pass "
        "stream_options={'include_usage': True} or use litellm.stream_chunk_builder(chunks)"
    )
