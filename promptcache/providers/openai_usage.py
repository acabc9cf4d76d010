"""Usage parsing for OpenAI: the provider's usage report -> :class:`promptcache.Usage`.

Registered with :func:`promptcache.normalize_usage` in :mod:`promptcache.providers.usage`.
"""

from __future__ import annotations

from promptcache.errors import UsageError
from promptcache.providers.usage_reconcile import reconcile_chat_usage
from promptcache.providers.usage_record import (
    CACHE_NOT_REPORTED,
    WRITE_TTL_ASSUMED,
    Usage,
    check_part,
    read_count,
    subpart,
)

# OpenAI usage (platform.openai.com "Prompt caching" and the API reference for the chat
# completion object and the response object, checked 2026-11):
# - Chat Completions: ``prompt_tokens`` INCLUDES ``prompt_tokens_details.cached_tokens``
#   (reads) and ``prompt_tokens_details.cache_write_tokens`` (writes, reported by newer
#   models that bill writes). Uncached = prompt_tokens - cached - written.
# - Responses: ``input_tokens`` INCLUDES ``input_tokens_details.cached_tokens`` and
#   ``cache_write_tokens``, the latter split by retention in
#   ``cache_write_tokens_details.ttl_30m_tokens`` / ``ttl_12h_tokens``.
# - Streaming chat: with ``stream_options={"include_usage": True}`` the LAST chunk carries
#   ``usage`` (earlier chunks have ``usage: null``). Streaming Responses: the
#   ``response.completed`` (or ``.incomplete`` / ``.failed``) event carries the response.
# A response without the details object reports no caching: unknown, not a miss.

#: TTL label for writes reported without a split (in-memory retention).
DEFAULT_WRITE_TTL = "30m"


def _not_reported(
    prompt: int, output: int, reasoning: int | None, provider: str, model: str | None
) -> Usage:
    """The usage of a response without cache details: caching unknown, never a miss."""
    return Usage(
        uncached_input_tokens=prompt,
        output_tokens=output,
        cache_reported=False,
        reasoning_tokens=reasoning,
        provider=provider,
        model=model,
        flags=(CACHE_NOT_REPORTED,),
    )


def usage_from_chat_fields(
    usage: dict, *, provider: str, model: str | None, where: str = "usage"
) -> Usage:
    """Build a ``Usage`` from Chat Completions usage fields (also used by
    OpenAI-compatible servers: vLLM, SGLang, the local engine, DeepSeek)."""
    prompt = read_count(usage, "prompt_tokens", where=where, required=True)
    output = read_count(usage, "completion_tokens", where=where) or 0
    details = subpart(usage, "prompt_tokens_details")
    cached = read_count(details, "cached_tokens", where=f"{where}.prompt_tokens_details")
    written = read_count(details, "cache_write_tokens", where=f"{where}.prompt_tokens_details") or 0
    out_details = subpart(usage, "completion_tokens_details")
    reasoning = read_count(
        out_details, "reasoning_tokens", where=f"{where}.completion_tokens_details"
    )
    if cached is None and not written:
        return _not_reported(prompt, output, reasoning, provider, model)
    cached = cached or 0
    check_part(
        cached + written,
        prompt,
        "prompt_tokens_details.cached_tokens + cache_write_tokens",
        "prompt_tokens",
    )
    return Usage(
        uncached_input_tokens=prompt - cached - written,
        cache_read_tokens=cached,
        cache_write_tokens=written,
        cache_write_by_ttl={DEFAULT_WRITE_TTL: written} if written else {},
        output_tokens=output,
        reasoning_tokens=reasoning,
        provider=provider,
        model=model,
        flags=(WRITE_TTL_ASSUMED,) if written else (),
    )


def usage_from_responses_fields(
    usage: dict, *, provider: str, model: str | None, where: str = "usage"
) -> Usage:
    """Build a ``Usage`` from Responses API usage fields."""
    total_in = read_count(usage, "input_tokens", where=where, required=True)
    output = read_count(usage, "output_tokens", where=where) or 0
    details = subpart(usage, "input_tokens_details")
    dw = f"{where}.input_tokens_details"
    cached = read_count(details, "cached_tokens", where=dw)
    written = read_count(details, "cache_write_tokens", where=dw) or 0
    reasoning = read_count(
        subpart(usage, "output_tokens_details"),
        "reasoning_tokens",
        where=f"{where}.output_tokens_details",
    )
    if cached is None and not written:
        return _not_reported(total_in, output, reasoning, provider, model)
    cached = cached or 0
    check_part(
        cached + written,
        total_in,
        "input_tokens_details.cached_tokens + cache_write_tokens",
        "input_tokens",
    )
    flags: tuple[str, ...] = ()
    split = subpart(details, "cache_write_tokens_details")
    if split is not None:
        w30 = read_count(split, "ttl_30m_tokens", where=f"{dw}.cache_write_tokens_details") or 0
        w12 = read_count(split, "ttl_12h_tokens", where=f"{dw}.cache_write_tokens_details") or 0
        if w30 + w12 != written:
            raise UsageError(
                f"inconsistent usage: cache_write_tokens_details splits into "
                f"{w30} (30m) + {w12} (12h) = {w30 + w12}, but "
                f"cache_write_tokens={written}"
            )
        ttl = {"30m": w30, "12h": w12}
    else:
        ttl = {DEFAULT_WRITE_TTL: written} if written else {}
        flags = (WRITE_TTL_ASSUMED,) if written else ()
    return Usage(
        uncached_input_tokens=total_in - cached - written,
        cache_read_tokens=cached,
        cache_write_tokens=written,
        cache_write_by_ttl=ttl,
        output_tokens=output,
        reasoning_tokens=reasoning,
        provider=provider,
        model=model,
        flags=flags,
    )


def usage_and_model(data: dict) -> tuple[dict, str | None]:
    if str(data.get("type", "")).startswith("response.") and isinstance(data.get("response"), dict):
        data = data["response"]
    usage = subpart(data, "usage")
    if usage is not None:
        return dict(usage), data.get("model")
    if any(k in data for k in ("prompt_tokens", "input_tokens")):
        return dict(data), None
    raise UsageError(
        "no OpenAI usage found: expected a response with .usage (for a stream, "
        "pass stream_options={'include_usage': True}), or a usage object"
    )


def parse_usage(data: dict, *, provider: str = "openai") -> Usage:
    """Normalize an OpenAI ChatCompletion / Response / usage (plain dict) to ``Usage``;
    Chat and Responses are told apart by ``prompt_tokens`` vs ``input_tokens``."""
    usage, model = usage_and_model(data)
    if "prompt_tokens" in usage:
        # a gateway may also give Anthropic's names; when they disagree, the reads win
        # (promptcache.providers.usage_reconcile)
        parsed = usage_from_chat_fields(usage, provider=provider, model=model)
        return reconcile_chat_usage(usage, parsed)
    return usage_from_responses_fields(usage, provider=provider, model=model)


def last_usage_event(events: list) -> dict:
    """The last event of a stream that carries a usage (chat chunk with non-null usage,
    or a terminal Responses event)."""
    for ev in reversed(events):
        if not isinstance(ev, dict):
            continue
        if isinstance(ev.get("usage"), dict):
            return ev
        resp = ev.get("response")
        if (
            str(ev.get("type", "")).startswith("response.")
            and isinstance(resp, dict)
            and isinstance(resp.get("usage"), dict)
        ):
            return ev
    raise UsageError(
        "no chunk in the OpenAI stream carries usage; request it with "
        "stream_options={'include_usage': True}"
    )


def parse_usage_stream(events: list, *, provider: str = "openai") -> Usage:
    """Normalize a streamed Chat Completions or Responses call: the usage is in the final
    usage chunk / terminal event (counts there are already totals, nothing to add)."""
    return parse_usage(last_usage_event(events), provider=provider)
