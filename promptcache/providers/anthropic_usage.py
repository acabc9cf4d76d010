"""Usage parsing for Anthropic: the provider's usage report -> :class:`promptcache.Usage`.

Registered with :func:`promptcache.normalize_usage` in :mod:`promptcache.providers.usage`.
"""

from __future__ import annotations

from promptcache.errors import UsageError
from promptcache.providers.usage_record import WRITE_TTL_ASSUMED, Usage, read_count, subpart

# Anthropic Messages usage (docs.anthropic.com "Prompt caching" > "Tracking cache
# performance", checked 2026-11): ``input_tokens`` counts only the tokens AFTER the last
# cache breakpoint, so the whole prompt is
#   input_tokens + cache_read_input_tokens + cache_creation_input_tokens.
# ``cache_creation`` splits creation by TTL: ephemeral_5m_input_tokens /
# ephemeral_1h_input_tokens. Streams: ``message_start`` carries the input-side usage and
# ``message_delta`` the cumulative ``output_tokens`` (and, on newer API versions, the
# cumulative input-side counts too, which then win).


def _anthropic_usage_dict(data: dict) -> tuple[dict, str | None]:
    """Find the usage mapping in a Message, a message_start event, or a bare usage."""
    if data.get("type") == "message_start" and isinstance(data.get("message"), dict):
        data = data["message"]
    usage = subpart(data, "usage")
    if usage is not None:
        return dict(usage), data.get("model")
    if "input_tokens" in data or "output_tokens" in data:
        return dict(data), None
    raise UsageError(
        "no Anthropic usage found: expected a Message with .usage, a usage "
        "object with input_tokens, or a message_start event"
    )


def usage_from_anthropic_fields(
    usage: dict, *, provider: str, model: str | None, where: str = "usage"
) -> Usage:
    """Build a :class:`promptcache.Usage` from Anthropic usage fields (also used for
    Bedrock InvokeModel, whose body is the Anthropic format)."""
    uncached = read_count(usage, "input_tokens", where=where, required=True)
    output = read_count(usage, "output_tokens", where=where) or 0
    read = read_count(usage, "cache_read_input_tokens", where=where) or 0
    write = read_count(usage, "cache_creation_input_tokens", where=where) or 0
    flags: list[str] = []
    split = subpart(usage, "cache_creation")
    if split is not None:
        w5 = read_count(split, "ephemeral_5m_input_tokens", where=f"{where}.cache_creation") or 0
        w1 = read_count(split, "ephemeral_1h_input_tokens", where=f"{where}.cache_creation") or 0
        if write == 0 and (w5 or w1):
            write = w5 + w1
        if w5 + w1 != write:
            raise UsageError(
                f"inconsistent usage: cache_creation splits into {w5} (5m) + {w1} (1h) = "
                f"{w5 + w1}, but cache_creation_input_tokens={write}"
            )
        ttl = {"5m": w5, "1h": w1}
    else:
        ttl = {"5m": write} if write else {}
        if write:
            flags.append(WRITE_TTL_ASSUMED)  # no split reported: Anthropic's default TTL is 5m
    details = subpart(usage, "output_tokens_details")
    reasoning = read_count(
        details, "thinking_tokens", "reasoning_tokens", where=f"{where}.output_tokens_details"
    )
    return Usage(
        uncached_input_tokens=uncached,
        cache_read_tokens=read,
        cache_write_tokens=write,
        output_tokens=output,
        cache_write_by_ttl=ttl,
        reasoning_tokens=reasoning,
        provider=provider,
        model=model,
        flags=tuple(flags),
    )


def parse_usage(data: dict, *, provider: str = "anthropic") -> Usage:
    """Normalize an Anthropic Message / usage / message_start (plain dict) to ``Usage``."""
    usage, model = _anthropic_usage_dict(data)
    return usage_from_anthropic_fields(usage, provider=provider, model=model)


def parse_usage_stream(events: list, *, provider: str = "anthropic") -> Usage:
    """Accumulate a Messages stream: ``message_start`` then ``message_delta`` events
    (cumulative counts: a later non-null field replaces the earlier one). A final
    ``Message`` in the list (e.g. from ``stream.get_final_message()``) is used as is."""
    usage: dict | None = None
    model = None
    for ev in events:
        if not isinstance(ev, dict):
            continue
        kind = ev.get("type")
        if kind == "message_start":
            usage, model = _anthropic_usage_dict(ev)
        elif kind == "message_delta" and isinstance(ev.get("usage"), dict):
            if usage is None:
                raise UsageError("message_delta before message_start in an Anthropic stream")
            for key, value in ev["usage"].items():
                if value is not None:
                    usage[key] = value
        elif kind == "message" and isinstance(ev.get("usage"), dict):
            usage, model = dict(ev["usage"]), ev.get("model")
    if usage is None:
        raise UsageError("no message_start event in the Anthropic stream: cannot read usage")
    return usage_from_anthropic_fields(usage, provider=provider, model=model)
