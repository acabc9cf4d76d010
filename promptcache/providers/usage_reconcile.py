"""Chat-shaped usages that carry a cache count twice, in two vocabularies, and disagree.

Gateways and proxies (LiteLLM, OpenRouter-style routers, some self-hosted servers behind
them) report a Chat Completions ``usage`` whose ``prompt_tokens`` covers the whole prompt,
with the reads given both as OpenAI's ``prompt_tokens_details.cached_tokens`` and as
Anthropic's ``cache_read_input_tokens`` (writes as ``prompt_tokens_details.cache_write_tokens``
/ ``cache_creation_tokens`` and ``cache_creation_input_tokens``). LiteLLM's ``Usage``
(litellm 1.110.2, ``litellm/types/utils.py``, ``Usage.__init__``: "ANTHROPIC MAPPING")
sets both from the provider's own fields; when one side is lost on the way (a proxy that
re-serializes only the Anthropic names, a custom provider that fills one), they disagree.

Rule: a count that says tokens were read (or written) wins over one that says zero or is
missing -- the provider would not invent reads -- and the larger of two non-zero counts is
taken; ``prompt_tokens`` stays the whole prompt, so ``prompt_tokens`` 5000 with
``cached_tokens`` 0 and ``cache_read_input_tokens`` 4980 is 4,980 reads and 20 uncached.
A :class:`~promptcache.errors.PromptCacheWarning` names both fields and the usage gets the
flag ``"cache_fields_disagreed"``.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

from promptcache.errors import PromptCacheWarning, UsageError
from promptcache.providers.usage_record import Usage, read_count, subpart

__all__ = ["FIELDS_DISAGREED", "reconcile_chat_usage", "chat_usage_of"]

#: Flag set on a usage whose two cache vocabularies disagreed.
FIELDS_DISAGREED = "cache_fields_disagreed"


def chat_usage_of(data: Any) -> Mapping[str, Any] | None:
    """The Chat Completions usage mapping inside ``data`` (a response or a usage), or None
    when ``data`` is not chat-shaped (no ``prompt_tokens``)."""
    if not isinstance(data, Mapping):
        return None
    usage = subpart(data, "usage")
    if usage is None and "prompt_tokens" in data:
        usage = data
    if usage is None or "prompt_tokens" not in usage:
        return None
    return usage


def _pick(a: int | None, b: int | None) -> int:
    return max(a or 0, b or 0)


def reconcile_chat_usage(data: Any, parsed: Usage) -> Usage:
    """``parsed`` corrected for a chat usage in ``data`` whose OpenAI and Anthropic cache
    fields disagree (see the module docstring); ``parsed`` unchanged otherwise.

    Raises :class:`UsageError` when the reconciled reads and writes exceed ``prompt_tokens``.
    """
    usage = chat_usage_of(data)
    if usage is None:
        return parsed
    where = "usage"
    alt_read = read_count(usage, "cache_read_input_tokens", where=where)
    alt_write = read_count(usage, "cache_creation_input_tokens", where=where)
    if alt_read is None and alt_write is None:
        return parsed
    details = subpart(usage, "prompt_tokens_details")
    dw = f"{where}.prompt_tokens_details"
    read = read_count(details, "cached_tokens", where=dw)
    write = read_count(details, "cache_write_tokens", "cache_creation_tokens", where=dw)
    disagree = []
    if alt_read is not None and read is not None and read != alt_read:
        disagree.append(
            f"prompt_tokens_details.cached_tokens={read} but cache_read_input_tokens={alt_read}"
        )
    if alt_write is not None and write is not None and write != alt_write:
        disagree.append(
            f"prompt_tokens_details.cache_write_tokens={write} but "
            f"cache_creation_input_tokens={alt_write}"
        )
    reads, writes = _pick(read, alt_read), _pick(write, alt_write)
    if (
        parsed.cache_reported
        and (parsed.cache_read_tokens, parsed.cache_write_tokens) == (reads, writes)
        and not disagree
    ):
        return parsed
    prompt = read_count(usage, "prompt_tokens", where=where, required=True) or 0
    if reads + writes > prompt:
        raise UsageError(
            f"inconsistent usage: {reads} cache reads + {writes} cache writes are more than "
            f"prompt_tokens={prompt}"
        )
    if disagree:
        warnings.warn(
            "usage cache fields disagree ("
            + "; ".join(disagree)
            + f"): counted {reads} cache reads, {writes} writes, "
            f"{prompt - reads - writes} uncached of {prompt} prompt tokens",
            PromptCacheWarning,
            stacklevel=3,
        )
    ttl = dict(parsed.cache_write_by_ttl)
    if sum(ttl.values()) != writes:
        ttl = {next(iter(ttl), "5m"): writes} if writes else {}
    flags = tuple(f for f in parsed.flags if f != "cache_not_reported")
    return parsed.replace(
        uncached_input_tokens=prompt - reads - writes,
        cache_read_tokens=reads,
        cache_write_tokens=writes,
        cache_write_by_ttl=ttl,
        cache_reported=True,
        flags=flags + ((FIELDS_DISAGREED,) if disagree else ()),
    )
