"""The causes a transcript can tell without the request it does not contain.

A transcript has each call's usage and time but not what was sent (system prompt, tools,
messages), so no JSON path can be named and no digest compared. Per lineage, in time order,
a call is compared with the previous call of its lineage:

- ``cold``: the first call of a lineage that read nothing (``hit`` if it read something:
  another session's entry, e.g. the shared system prompt);
- ``hit``: it read at least what the previous call left cached (Anthropic: that call's
  reads + writes; OpenAI: its prompt, rounded down to the 128-token increment above the
  1,024-token minimum -- :data:`promptcache.limits.OPENAI_CACHE_INCREMENT`);
- ``ttl_expired``: it read less, and the gap since the previous call is longer than the
  TTL of what that call wrote (Anthropic 5 minutes, or 1 hour when it wrote 1-hour entries;
  OpenAI in-memory retention 5 minutes, the lower bound of the documented 5-10;
  :mod:`promptcache.limits`);
- ``prefix_changed``: it read less within the TTL, and what it read equals a *stable
  boundary*: a read length already seen in at least :data:`STABLE_SEEN` earlier calls of the
  same model (the end of the tools and system prompt every session reads): the request
  changed after that boundary. The path stays None (unknown);
- ``unknown``: it read less within the TTL and the read is not at a stable boundary --
  eviction, routing or a change anywhere: the transcript cannot say which.

Calls whose provider did not report caching get no cause (None).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

from promptcache.limits import (
    ANTHROPIC_TTL_SECONDS,
    OPENAI_CACHE_INCREMENT,
    OPENAI_MIN_CACHED_TOKENS,
    OPENAI_TTL_SECONDS,
)
from promptcache.misses.cause import Attribution
from promptcache.transcripts.calls import TranscriptCall

__all__ = ["assign_causes", "STABLE_SEEN"]

#: Earlier calls (same model) that must have read exactly this many tokens for a read
#: length to count as a stable boundary.
STABLE_SEEN = 2


@dataclass
class _Prev:
    ts: float
    prompt: int
    read: int
    write: int
    ttl_1h: bool
    provider: str


def _cached_after(p: _Prev) -> int:
    """Tokens the previous call left in the cache."""
    if p.provider == "anthropic":
        return p.read + p.write
    if p.prompt < OPENAI_MIN_CACHED_TOKENS:
        return 0
    return p.prompt - (p.prompt - OPENAI_MIN_CACHED_TOKENS) % OPENAI_CACHE_INCREMENT


def _ttl(p: _Prev) -> float:
    if p.provider == "anthropic":
        return ANTHROPIC_TTL_SECONDS["1h" if p.ttl_1h else "5m"]
    return float(OPENAI_TTL_SECONDS["in_memory"])


def assign_causes(calls: Iterable[TranscriptCall]) -> dict[str, Attribution]:
    """The :class:`~promptcache.misses.cause.Attribution` of each call, by ``call.key``
    (calls are taken in time order; ties keep their given order)."""
    ordered = sorted(calls, key=lambda c: c.ts)
    last: dict[str, _Prev] = {}
    seen_reads: dict[str | None, Counter[int]] = {}
    out: dict[str, Attribution] = {}
    for c in ordered:
        u = c.usage
        reads = seen_reads.setdefault(c.model, Counter())
        prev = last.get(c.lineage)
        out[c.key] = _cause(c, prev, reads)
        if u.cache_read_tokens > 0:
            reads[u.cache_read_tokens] += 1
        last[c.lineage] = _Prev(
            c.ts, u.prompt_tokens, u.cache_read_tokens, u.cache_write_tokens, c.ttl_1h, c.provider
        )
    return out


def _cause(c: TranscriptCall, prev: _Prev | None, reads: Counter[int]) -> Attribution:
    u = c.usage
    read = u.cache_read_tokens
    if not u.cache_reported:
        return Attribution(None, detail="the provider did not report cached tokens")
    if prev is None:
        if read > 0:
            return Attribution("hit", matched_prefix_tokens=read, detail=f"read {read} tokens")
        return Attribution("cold", detail="the first call of this session read nothing")
    cached = _cached_after(prev)
    tolerance = 0 if prev.provider == "anthropic" else OPENAI_CACHE_INCREMENT
    if read + tolerance >= cached:
        if read == 0:
            return Attribution("cold", detail="nothing was cached by the previous call")
        return Attribution(
            "hit",
            matched_prefix_tokens=read,
            detail=f"read {read} of the {cached} tokens the previous call left cached",
        )
    gap, ttl = c.ts - prev.ts, _ttl(prev)
    if gap > ttl:
        return Attribution(
            "ttl_expired",
            matched_prefix_tokens=read,
            detail=f"{gap:.0f} s since the previous call of this session, more than the "
            f"{ttl:.0f} s TTL of what it wrote; read {read} of {cached} tokens",
        )
    if read > 0 and reads[read] >= STABLE_SEEN:
        return Attribution(
            "prefix_changed",
            matched_prefix_tokens=read,
            detail=f"the read fell back to {read} tokens, a boundary {reads[read]} earlier "
            f"calls read exactly: the request changed after it (the transcript has no "
            f"request, so where is unknown); {cached - read} cached tokens were not read",
        )
    return Attribution(
        "unknown",
        matched_prefix_tokens=read,
        detail=f"read {read} of the {cached} tokens the previous call left cached, "
        f"{gap:.0f} s later (within the TTL); the transcript cannot say why",
    )
