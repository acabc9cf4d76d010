"""The numbers of the live view (``promptcache report --serve``, the proxy's ``/_promptcache``).

:class:`LiveState` follows a ledger as it grows (new records are read incrementally; a change
it cannot explain -- records inserted with older timestamps, deletions -- triggers a full
re-read) and answers :meth:`LiveState.snapshot`: a JSON-ready dict with

- ``totals``: requests, prompt / cache-read / cache-write / output tokens, the token-weighted
  hit rate over the requests whose provider reported caching (``None`` when none did: unknown
  is not a miss), cost, no-cache baseline and saving in USD (priced requests only) -- the same
  sums as ``Tracker.summary(by=None)``;
- ``series``: per time bucket (``bucket_s`` seconds, picked so that at most
  :data:`MAX_BUCKETS` buckets span the period): requests, hit rate, cost;
- ``causes``: misses by cause (every cause of :data:`promptcache.misses.cause.MISS_CAUSES`
  seen; hits and unattributed requests are not misses): requests and missed tokens;
- ``paths``: the top offending (cause, JSON path, model) groups by missed tokens;
- ``calls``: the latest :data:`RECENT_CALLS` calls, newest first, for the drill-down.

:func:`call_detail` is one call's drill-down: the first differing path, the characters and
estimated tokens before it, the tokens not read from the cache and the cost of the miss.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from promptcache.errors import PromptCacheError
from promptcache.ledger.pricing import cost
from promptcache.ledger.tracker import Record, Tracker
from promptcache.misses.cause import MISS_CAUSES

__all__ = ["LiveState", "call_detail", "pick_bucket", "MAX_BUCKETS", "RECENT_CALLS"]

#: Most time buckets a series has (the chart's x axis labels stay readable: the page shows
#: at most 6 of them).
MAX_BUCKETS = 60
#: Calls listed for the drill-down.
RECENT_CALLS = 200
_STEPS = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200)
_DAY = 86400


def pick_bucket(span_s: float) -> int:
    """The smallest bucket width in seconds (1 s, 2 s, 5 s, ... 1 h, ... whole days) that
    splits ``span_s`` seconds into at most :data:`MAX_BUCKETS` buckets."""
    for step in _STEPS:
        if span_s / step <= MAX_BUCKETS - 1:
            return step
    days = 1
    while span_s / (days * _DAY) > MAX_BUCKETS - 1:
        days *= 2
    return days * _DAY


def _missed(r: Record) -> int:
    """Prompt tokens the call did not read from the cache (the ledger's ``missed_tokens``)."""
    return r.usage.prompt_tokens - r.usage.cache_read_tokens


def _is_miss(r: Record) -> bool:
    return r.miss_cause in MISS_CAUSES


def _usd(x: Decimal | None) -> str | None:
    return None if x is None else str(x)


def miss_cost(r: Record) -> Decimal | None:
    """The cost of ``r``'s miss in USD: its cost at the model's bundled price minus the cost
    of the same call had every prompt token it did not read been read from the cache. An
    upper bound (part of what it did not read may be new content no cache could hold); None
    for a call that is not a miss or whose model has no known price."""
    if not _is_miss(r):
        return None
    u = r.usage
    if_hit = u.replace(
        uncached_input_tokens=0,
        cache_write_tokens=0,
        cache_write_by_ttl={},
        cache_read_tokens=u.prompt_tokens,
    )
    try:
        return cost(u, r.model).total - cost(if_hit, r.model).total
    except PromptCacheError:
        return None


def call_detail(r: Record) -> dict[str, Any]:
    """One call's drill-down as a JSON-ready dict (see the module docstring)."""
    u = r.usage
    lost = miss_cost(r)
    return {
        "record_id": r.record_id,
        "ts": r.ts,
        "model": r.model,
        "provider": r.provider,
        "api": r.api,
        "lineage": r.lineage,
        "stream": r.stream,
        "latency_ms": r.latency_ms,
        "ttft_ms": r.ttft_ms,
        "prompt_tokens": u.prompt_tokens,
        "cache_read_tokens": u.cache_read_tokens,
        "cache_write_tokens": u.cache_write_tokens,
        "output_tokens": u.output_tokens,
        "cache_reported": u.cache_reported,
        "cost": _usd(r.cost),
        "cause": r.miss_cause,
        "is_miss": _is_miss(r),
        "path": r.miss_path,
        "offset_chars": r.miss_offset_chars,
        "offset_tokens": r.miss_offset_tokens,
        "matched_prefix_tokens": r.matched_prefix_tokens,
        "missed_tokens": _missed(r) if _is_miss(r) else 0,
        "miss_cost": _usd(lost),
        "detail": r.miss_detail,
    }


@dataclass
class _Acc:
    requests: int = 0
    reported_read: int = 0
    reported_prompt: int = 0
    cost: Decimal = Decimal(0)
    priced: int = 0


class LiveState:
    """The live view's numbers over one ledger, refreshed on each :meth:`snapshot`.

    Args:
        tracker: the ledger to read (read-only use).
        extra: returns more JSON-ready fields for the snapshot (the proxy's counters).
    """

    def __init__(self, tracker: Tracker, extra: Callable[[], dict[str, Any]] | None = None):
        self.tracker = tracker
        self.extra = extra
        self._records: dict[str, Record] = {}
        self._order: list[Record] = []
        self._lock = threading.Lock()

    def refresh(self) -> None:
        """Read the records added since the last refresh (a full re-read when the count
        does not add up)."""
        with self._lock:
            count = self.tracker.count()
            if count == len(self._records):
                return
            if self._order:
                since = self._order[-1].ts - 60.0
                for r in self.tracker.records(since=since):
                    if r.record_id not in self._records:
                        self._records[r.record_id] = r
                        self._order.append(r)
            if len(self._records) != count:
                fresh = self.tracker.records()
                self._records = {r.record_id: r for r in fresh}
                self._order = list(fresh)
            self._order.sort(key=lambda r: r.ts)

    def record(self, record_id: str) -> Record | None:
        """A record by id (after a refresh), or None."""
        self.refresh()
        with self._lock:
            return self._records.get(record_id)

    def snapshot(self) -> dict[str, Any]:
        """The live view's numbers now (see the module docstring)."""
        self.refresh()
        with self._lock:
            rows = list(self._order)
        out: dict[str, Any] = {
            "totals": _totals(rows),
            **_series(rows),
            "causes": _causes(rows),
            "paths": _paths(rows),
            "calls": [_call_row(r) for r in reversed(rows[-RECENT_CALLS:])],
        }
        if self.extra is not None:
            out["proxy"] = self.extra()
        return out


def _totals(rows: list[Record]) -> dict[str, Any]:
    read = prompt = rep_read = rep_prompt = write = output = unreported = priced = 0
    total = baseline = Decimal(0)
    misses = 0
    for r in rows:
        u = r.usage
        prompt += u.prompt_tokens
        read += u.cache_read_tokens
        write += u.cache_write_tokens
        output += u.output_tokens
        if u.cache_reported:
            rep_read += u.cache_read_tokens
            rep_prompt += u.prompt_tokens
        else:
            unreported += 1
        if r.cost is not None:
            priced += 1
            total += r.cost
            baseline += r.baseline or Decimal(0)
        misses += _is_miss(r)
    return {
        "requests": len(rows),
        "prompt_tokens": prompt,
        "cache_read_tokens": read,
        "cache_write_tokens": write,
        "output_tokens": output,
        "hit_rate": rep_read / rep_prompt if rep_prompt else None,
        "unreported_requests": unreported,
        "priced_requests": priced,
        "cost": str(total) if priced else None,
        "baseline": str(baseline) if priced else None,
        "saving": str(baseline - total) if priced else None,
        "misses": misses,
    }


def _series(rows: list[Record]) -> dict[str, Any]:
    if not rows:
        return {"bucket_s": None, "series": []}
    lo, hi = rows[0].ts, rows[-1].ts
    bucket = pick_bucket(hi - lo)
    start = int(lo // bucket) * bucket
    acc: dict[int, _Acc] = {}
    for r in rows:
        b = int((r.ts - start) // bucket)
        a = acc.setdefault(b, _Acc())
        a.requests += 1
        if r.usage.cache_reported:
            a.reported_read += r.usage.cache_read_tokens
            a.reported_prompt += r.usage.prompt_tokens
        if r.cost is not None:
            a.cost += r.cost
            a.priced += 1
    series = []
    for b in sorted(acc):
        a = acc[b]
        series.append(
            {
                "t": start + b * bucket,
                "requests": a.requests,
                "hit_rate": a.reported_read / a.reported_prompt if a.reported_prompt else None,
                "cost": str(a.cost) if a.priced else None,
            }
        )
    return {"bucket_s": bucket, "series": series}


def _causes(rows: list[Record]) -> list[dict[str, Any]]:
    acc: dict[str, list[int]] = {}
    for r in rows:
        if _is_miss(r):
            a = acc.setdefault(str(r.miss_cause), [0, 0])
            a[0] += 1
            a[1] += _missed(r)
    out: list[dict[str, Any]] = [
        {"cause": c, "requests": n, "missed_tokens": t} for c, (n, t) in acc.items()
    ]
    out.sort(key=lambda g: (-g["missed_tokens"], -g["requests"], g["cause"]))
    return out


def _paths(rows: list[Record], top: int = 10) -> list[dict[str, Any]]:
    acc: dict[tuple[str, str, str], list[Any]] = {}
    for r in rows:
        if not _is_miss(r) or not r.miss_path:
            continue
        key = (str(r.miss_cause), r.miss_path, r.model or "")
        a = acc.setdefault(key, [0, 0, Decimal(0), 0])
        a[0] += 1
        a[1] += _missed(r)
        c = miss_cost(r)
        if c is not None:
            a[2] += c
            a[3] += 1
    out = [
        {
            "cause": cause,
            "path": path,
            "model": model or None,
            "requests": n,
            "missed_tokens": t,
            "miss_cost": str(c) if priced else None,
        }
        for (cause, path, model), (n, t, c, priced) in acc.items()
    ]
    out.sort(key=lambda g: (-g["missed_tokens"], -g["requests"], g["path"]))
    return out[:top]


def _call_row(r: Record) -> dict[str, Any]:
    u = r.usage
    return {
        "record_id": r.record_id,
        "ts": r.ts,
        "model": r.model,
        "cause": r.miss_cause,
        "is_miss": _is_miss(r),
        "prompt_tokens": u.prompt_tokens,
        "cache_read_tokens": u.cache_read_tokens,
        "cost": _usd(r.cost),
        "path": r.miss_path,
    }
