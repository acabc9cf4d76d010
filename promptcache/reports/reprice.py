"""Reprice recorded requests at report time (``promptcache report --prices FILE`` and
``PROMPTCACHE_PRICES``).

The ledger stores each request's cost as it was known when the call was recorded: a model
with no price then is stored without a cost. Given a prices TOML file, :func:`repriced_summary`
re-aggregates the stored records (their token counts are kept) with:

- the file's row, for every request whose model the file prices (it overrides the stored
  cost: a corrected price fixes old rows);
- else the stored cost;
- else, for a request stored without a cost, the bundled/registered price if one is known
  now (a price added in a later promptcache release fixes old rows too);
- else the request stays unpriced (``n/a``).

It reads every record in the period (``Tracker.records``), so it is slower than the
rollup-backed :meth:`promptcache.Tracker.summary`; it is used only when a price file is given.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timezone
from decimal import Decimal

from promptcache.errors import PromptCacheError
from promptcache.ledger.pricing import PriceTable, cost_pico, price_for
from promptcache.ledger.tracker import PICO, Record, SummaryRow

__all__ = ["repriced_summary", "record_key"]


def record_key(rec: Record, by: str | None) -> str | None:
    """The group key of ``rec`` for ``by`` (the same keys as ``Tracker.summary``)."""
    if by is None:
        return None
    if by == "day":
        return datetime.fromtimestamp(rec.ts, timezone.utc).strftime("%Y-%m-%d")
    if by == "hour":
        return datetime.fromtimestamp(rec.ts, timezone.utc).strftime("%Y-%m-%dT%H:00Z")
    if by.startswith("metadata."):
        v = rec.metadata.get(by[len("metadata.") :])
        return None if v is None else str(v)
    if by in ("provider", "model", "prefix_hash", "api"):
        v = getattr(rec, by)
        return None if v in (None, "") else str(v)
    raise ValueError(f"by={by!r}: use provider, model, prefix_hash, day, hour, api, metadata.KEY")


def _pico_cost(rec: Record, table: PriceTable) -> tuple[int, int] | None:
    """``(cost, baseline)`` of one record in pico-USD, or None when no price is known."""
    model = rec.model or rec.usage.model
    price = table.lookup(model) if model else None
    if price is None:
        if rec.cost is not None and rec.baseline is not None:
            return int(rec.cost * PICO), int(rec.baseline * PICO)
        if not model:
            return None
        try:
            price = price_for(model)
        except PromptCacheError:
            return None
    try:
        total, baseline, _ = cost_pico(rec.usage, model=model, price=price)
    except PromptCacheError:  # e.g. cache reads with no cache_read price in the row
        return None
    return total, baseline


@dataclass
class _Acc:
    requests: int = 0
    uncached: int = 0
    read: int = 0
    write: int = 0
    output: int = 0
    reported_read: int = 0
    reported_prompt: int = 0
    unreported: int = 0
    cost: int = 0
    baseline: int = 0
    unpriced: int = 0
    misses: int = 0
    latency_sum: float = 0.0
    latency_n: int = 0


def repriced_summary(
    records: Iterable[Record], by: str | None, table: PriceTable
) -> list[SummaryRow]:
    """``Tracker.summary``-shaped rows over ``records`` with costs from ``table`` (see the
    module docstring for which price wins); ordered as ``Tracker.summary`` orders them."""
    acc: dict[str | None, _Acc] = {}
    for rec in records:
        a = acc.setdefault(record_key(rec, by), _Acc())
        u = rec.usage
        a.requests += 1
        a.uncached += u.uncached_input_tokens
        a.read += u.cache_read_tokens
        a.write += u.cache_write_tokens
        a.output += u.output_tokens
        if u.cache_reported:
            a.reported_read += u.cache_read_tokens
            a.reported_prompt += u.prompt_tokens
            a.misses += u.cache_read_tokens == 0
        else:
            a.unreported += 1
        c = _pico_cost(rec, table)
        if c is None:
            a.unpriced += 1
        else:
            a.cost += c[0]
            a.baseline += c[1]
        if rec.latency_ms is not None:
            a.latency_sum += rec.latency_ms
            a.latency_n += 1
    out = []
    for k, a in acc.items():
        cost, base = Decimal(a.cost) / PICO, Decimal(a.baseline) / PICO
        out.append(
            SummaryRow(
                key=k,
                requests=a.requests,
                uncached_input_tokens=a.uncached,
                cache_read_tokens=a.read,
                cache_write_tokens=a.write,
                output_tokens=a.output,
                prompt_tokens=a.uncached + a.read + a.write,
                hit_rate=(a.reported_read / a.reported_prompt) if a.reported_prompt else None,
                unreported_requests=a.unreported,
                cost=cost,
                baseline=base,
                saving=base - cost,
                unpriced_requests=a.unpriced,
                misses=a.misses,
                mean_latency_ms=(a.latency_sum / a.latency_n) if a.latency_n else None,
            )
        )
    if by in ("day", "hour"):
        out.sort(key=lambda s: s.key or "")
    else:
        out.sort(key=lambda s: (-s.cost, -s.requests, s.key or ""))
    return out
