"""Usage parsing for Amazon Bedrock: the provider's usage report -> :class:`promptcache.Usage`.

Registered with :func:`promptcache.normalize_usage` in :mod:`promptcache.providers.usage`.
"""

from __future__ import annotations

from promptcache.errors import UsageError
from promptcache.limits import BEDROCK_TTLS
from promptcache.providers.anthropic_usage import parse_usage as anthropic_parse
from promptcache.providers.anthropic_usage import parse_usage_stream as anthropic_stream
from promptcache.providers.usage_record import WRITE_TTL_ASSUMED, Usage, read_count, subpart

# Amazon Bedrock (docs.aws.amazon.com/bedrock/latest/APIReference API_runtime_TokenUsage
# and API_runtime_CacheDetail, and the user guide "Prompt caching", checked 2026-11):
# - Converse / ConverseStream ``usage``: ``inputTokens`` EXCLUDES cache reads and writes
#   (like Anthropic), ``cacheReadInputTokens``, ``cacheWriteInputTokens``, and
#   ``cacheDetails`` = [{"ttl": "5m"|"1h", "inputTokens": n}] splitting the writes.
#   ConverseStream sends it in the final ``metadata`` event.
# - InvokeModel with an Anthropic model: the body is the Anthropic Messages format
#   (parsed by the Anthropic rules); the response headers
#   ``x-amzn-bedrock-input-token-count`` / ``-output-token-count`` /
#   ``-cache-read-input-token-count`` / ``-cache-write-input-token-count`` carry the same
#   counts for any model.

_HEADER_PREFIX = "x-amzn-bedrock-"


def _converse_usage(usage: dict, *, provider: str, model: str | None) -> Usage:
    w = "usage"
    uncached = read_count(usage, "inputTokens", where=w, required=True)
    output = read_count(usage, "outputTokens", where=w) or 0
    read = read_count(usage, "cacheReadInputTokens", where=w) or 0
    write = read_count(usage, "cacheWriteInputTokens", where=w) or 0
    details = usage.get("cacheDetails")
    flags: tuple[str, ...] = ()
    if isinstance(details, list) and details:
        ttl: dict[str, int] = {}
        for i, d in enumerate(details):
            label = d.get("ttl") if isinstance(d, dict) else None
            if label not in BEDROCK_TTLS:
                allowed = " or ".join(repr(t) for t in BEDROCK_TTLS)
                raise UsageError(f"usage.cacheDetails[{i}].ttl must be {allowed}, got {label!r}")
            n = read_count(d, "inputTokens", where=f"usage.cacheDetails[{i}]", required=True)
            ttl[label] = ttl.get(label, 0) + n
        if sum(ttl.values()) != write:
            raise UsageError(
                f"inconsistent usage: cacheDetails sum to {sum(ttl.values())}, "
                f"but cacheWriteInputTokens={write}"
            )
    else:
        ttl = {"5m": write} if write else {}
        flags = (WRITE_TTL_ASSUMED,) if write else ()
    return Usage(
        uncached_input_tokens=uncached,
        cache_read_tokens=read,
        cache_write_tokens=write,
        cache_write_by_ttl=ttl,
        output_tokens=output,
        provider=provider,
        model=model,
        flags=flags,
    )


def _header_usage(headers: dict, *, provider: str, model: str | None) -> Usage:
    h = {str(k).lower(): v for k, v in headers.items()}

    def num(name: str) -> int | None:
        raw = h.get(_HEADER_PREFIX + name)
        if raw is None:
            return None
        try:
            return int(str(raw).strip())
        except ValueError:
            raise UsageError(f"header {_HEADER_PREFIX + name} is not an integer: {raw!r}") from None

    usage = {
        "inputTokens": num("input-token-count"),
        "outputTokens": num("output-token-count"),
        "cacheReadInputTokens": num("cache-read-input-token-count"),
        "cacheWriteInputTokens": num("cache-write-input-token-count"),
    }
    read_count(usage, "inputTokens", where="InvokeModel headers", required=True)
    return _converse_usage(usage, provider=provider, model=model)


def parse_usage(data: dict, *, provider: str = "bedrock") -> Usage:
    """Normalize a Bedrock Converse response / usage, a ConverseStream ``metadata`` event,
    an InvokeModel Anthropic body, or an InvokeModel response's HTTP headers."""
    if isinstance(data.get("metadata"), dict):  # ConverseStream metadata event
        data = data["metadata"]
    usage = subpart(data, "usage")
    model = data.get("modelId") if isinstance(data.get("modelId"), str) else None
    if usage is None and "inputTokens" in data:
        usage = data
    if usage is not None and "inputTokens" in usage:
        return _converse_usage(dict(usage), provider=provider, model=model)
    if (
        (usage is not None and "input_tokens" in usage)
        or "input_tokens" in data
        or data.get("type") == "message_start"
    ):
        return anthropic_parse(data, provider=provider)
    headers = subpart(subpart(data, "ResponseMetadata"), "HTTPHeaders") or (
        data if any(str(k).lower().startswith(_HEADER_PREFIX) for k in data) else None
    )
    if headers is not None:
        return _header_usage(dict(headers), provider=provider, model=model)
    raise UsageError(
        "no Bedrock usage found: expected a Converse response with usage "
        "(inputTokens...), an InvokeModel body with Anthropic usage, or the "
        "x-amzn-bedrock-*-token-count response headers"
    )


def parse_usage_stream(events: list, *, provider: str = "bedrock") -> Usage:
    """Normalize a ConverseStream (the ``metadata`` event) or an InvokeModelWithResponseStream
    of Anthropic events (``message_start`` + ``message_delta``)."""
    for ev in reversed(events):
        if (
            isinstance(ev, dict)
            and isinstance(ev.get("metadata"), dict)
            and isinstance(ev["metadata"].get("usage"), dict)
        ):
            return parse_usage(ev, provider=provider)
    if any(isinstance(ev, dict) and ev.get("type") == "message_start" for ev in events):
        return anthropic_stream(events, provider=provider)
    raise UsageError("no metadata event with usage in the Bedrock stream")
