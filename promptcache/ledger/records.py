"""The ledger's records in memory: a stored request (:class:`Record`), summary rows, time bounds,
and the conversion between a request and its row of ``requests`` (:func:`build_row`,
:func:`record_from_row`).

Costs are stored as integer pico-dollars (1e-12 USD, :data:`PICO`) so that sums are exact.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from functools import lru_cache
from typing import Any

from promptcache.ledger.pricing import Price
from promptcache.ledger.summary_table import format_table
from promptcache.memo import IdentityMemo
from promptcache.misses.attribution import Attributed
from promptcache.misses.digest_chain import DigestChain
from promptcache.providers.usage_record import Usage

PICO = Decimal(10) ** 12


@dataclass(frozen=True)
class Record:
    """One stored request, as read back by :meth:`Tracker.records`."""

    record_id: str
    ts: float
    provider: str | None
    model: str | None
    api: str | None
    prefix_hash: str | None
    usage: Usage
    cost: Decimal | None
    baseline: Decimal | None
    latency_ms: float | None
    ttft_ms: float | None
    stream: bool
    metadata: Mapping[str, Any] = field(default_factory=dict)
    prompt_text: str | None = None
    #: why it missed: one of :data:`promptcache.misses.cause.CAUSES` (None: caching not
    #: reported, or the request was recorded without its body)
    miss_cause: str | None = None
    #: JSON path of the first difference from the lineage's previous request, or None
    miss_path: str | None = None
    #: tokens of the prefix shared with the previous request (estimated), or None
    matched_prefix_tokens: int | None = None
    #: characters / estimated tokens of the request before the first difference
    miss_offset_chars: int | None = None
    miss_offset_tokens: int | None = None
    #: one sentence saying why
    miss_detail: str | None = None
    #: (before, after) text around the difference; only with ``store_prompts=True``
    miss_excerpt: tuple[str, str] | None = None
    #: the lineage key the request was compared in
    lineage: str | None = None


@dataclass(frozen=True)
class SummaryRow:
    """Aggregates for one group of :meth:`Tracker.summary`.

    Token counts are sums over the group's requests. ``hit_rate`` is token-weighted:
    cache-read tokens / prompt tokens over the requests whose provider reported caching
    (None when none did); ``unreported_requests`` counts the others (unknown, not misses).
    ``cost``, ``baseline`` (no-cache cost) and ``saving`` are USD over the priced
    requests; ``unpriced_requests`` had no known price (left out of those sums; when every
    request of the group is unpriced, ``to_dict`` gives None and reports print ``n/a``).
    """

    key: str | None
    requests: int
    uncached_input_tokens: int
    cache_read_tokens: int
    cache_write_tokens: int
    output_tokens: int
    prompt_tokens: int
    hit_rate: float | None
    unreported_requests: int
    cost: Decimal
    baseline: Decimal
    saving: Decimal
    unpriced_requests: int
    misses: int = 0
    mean_latency_ms: float | None = None

    @property
    def priced_requests(self) -> int:
        """Requests of the group whose cost is known (counted in ``cost``)."""
        return self.requests - self.unpriced_requests

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict: USD as decimal strings, None when no request had a price."""
        d = self.__dict__.copy()
        for k in ("cost", "baseline", "saving"):
            d[k] = str(d[k]) if self.priced_requests else None
        return d


class Summary(list[SummaryRow]):
    """The rows of :meth:`Tracker.summary` (a ``list`` of :class:`SummaryRow`) whose
    ``str()`` is the table ``promptcache report`` prints, TOTAL row and notes included,
    so ``print(tracker.summary(by="model"))`` reads like the report. ``by``: the grouping;
    ``total``: the overall row, or None (read from the ledger on first use)."""

    def __init__(
        self,
        rows: Iterable[SummaryRow],
        by: str | None,
        total: Callable[[], SummaryRow | None],
    ) -> None:
        super().__init__(rows)
        self.by = by
        self._total_fn = total
        self._total: list[SummaryRow | None] = []

    @property
    def total(self) -> SummaryRow | None:
        """The overall row of the same period (None when it has no requests)."""
        if not self._total:
            self._total.append(self._total_fn())
        return self._total[0]

    def __str__(self) -> str:
        if not self:
            return "no requests in this period"
        return format_table(list(self), self.by or "all", self.total)


_SINCE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_since(since: Any, now: float | None = None) -> float | None:
    """A lower time bound as a Unix timestamp (seconds). Accepts None, a number (Unix
    seconds), a ``datetime`` (naive = UTC), a ``timedelta`` (that long ago), a duration
    string ``"30m"``, ``"24h"``, ``"7d"``, ``"2w"``, or an ISO date/datetime string.
    Raises ``ValueError`` with the accepted forms otherwise."""
    if since is None:
        return None
    now = time.time() if now is None else now
    if isinstance(since, bool):
        raise ValueError(f"since={since!r}: expected a duration like 7d, a date or a time")
    if isinstance(since, (int, float)):
        return float(since)
    if isinstance(since, timedelta):
        return now - since.total_seconds()
    if isinstance(since, datetime):
        if since.tzinfo is None:
            since = since.replace(tzinfo=timezone.utc)
        return float(since.timestamp())
    if isinstance(since, str):
        m = _SINCE.match(since)
        if m:
            return now - float(m.group(1)) * _UNITS[m.group(2)]
        try:
            return parse_since(datetime.fromisoformat(since.strip()), now)
        except ValueError:
            pass
    raise ValueError(
        f"since={since!r}: expected a duration such as 30m, 24h, 7d, 2w, an "
        "ISO date such as 2026-07-01, or a Unix timestamp"
    )


_PRICE_JSON: IdentityMemo[Price, str] = IdentityMemo(1024)


def price_json(price: Price | None) -> str | None:
    """The price row stored with a record (cached per Price object)."""
    if price is None:
        return None
    return _PRICE_JSON.get_or_make(price, lambda: json.dumps(price.to_dict(), sort_keys=True))


def range_where(
    column: str, lo: float | None, hi: float | None, param: str
) -> tuple[str, list[float]]:
    """``("WHERE column >= ? AND column < ?", [lo, hi])`` for a half-open range ``[lo, hi)``;
    a None bound is left out (no bounds: an empty clause). ``param`` is the dialect's
    placeholder (``?`` or ``%s``)."""
    where, params = [], []
    if lo is not None:
        where.append(f"{column} >= {param}")
        params.append(lo)
    if hi is not None:
        where.append(f"{column} < {param}")
        params.append(hi)
    return ("WHERE " + " AND ".join(where) if where else ""), params


def day_of_ts(ts: float) -> str:
    """UTC date of a Unix timestamp, 'YYYY-MM-DD' (cached per day)."""
    return _day_of(int(ts // 86400))


@lru_cache(maxsize=4096)
def _day_of(day: int) -> str:
    """'YYYY-MM-DD' of the ``day``-th day after 1970-01-01 (UTC)."""
    return datetime.fromtimestamp(day * 86400, timezone.utc).strftime("%Y-%m-%d")


def pusd(amount: Decimal) -> int:
    """USD -> integer pico-dollars (exact for prices with <= 6 decimals; else rounded)."""
    return int((amount * PICO).to_integral_value())


@dataclass(frozen=True)
class Atoms:
    """Carries a record's chain JSON and its atoms to the write transaction."""

    text: str
    chain: DigestChain


def build_row(
    usage: Usage,
    *,
    record_id: str | None,
    ts: float,
    model: str | None,
    provider: str | None,
    api: str | None,
    prefix_hash: str | None,
    cost_pusd: tuple[int | None, int | None, str | None],
    latency_ms: float | None,
    ttft_ms: float | None,
    stream: bool,
    metadata: Mapping[str, Any] | None,
    prompt: str | None,
    store_prompts: bool,
    attributed: Attributed | None,
    retention: Any,
) -> tuple[Any, ...]:
    """One row of ``requests`` in :data:`promptcache.ledger.schema.COLUMNS` order.

    ``cost_pusd``: ``(cost, baseline, price JSON)``, pico-dollars, all None when unpriced.
    ``prompt`` and the miss excerpt (the text around the first difference) are stored only
    with ``store_prompts``. ``retention``: the request's
    ``prompt_cache_retention`` (kept in the chain JSON when a string). The chain column holds
    an :class:`Atoms` carrier that the store replaces by its JSON inside the write."""
    miss: tuple[Any, ...] = (None,) * 9
    if attributed is not None:
        a = attributed.attribution
        excerpt = None
        if store_prompts and a.before is not None and a.after is not None:
            excerpt = json.dumps([a.before, a.after], ensure_ascii=False)
        chain_json = attributed.chain.to_json()
        if isinstance(retention, str):
            chain_json["retention"] = retention
        miss = (
            a.cause,
            a.path,
            a.matched_prefix_tokens if a.cause is not None else None,
            a.offset_chars,
            a.offset_tokens,
            a.detail or None,
            excerpt,
            attributed.lineage,
            Atoms(json.dumps(chain_json, separators=(",", ":")), attributed.chain),
        )
    cost_p, base_p, price_text = cost_pusd
    return (
        record_id or os.urandom(16).hex(),
        ts,
        day_of_ts(ts),
        provider,
        model,
        api,
        prefix_hash,
        usage.uncached_input_tokens,
        usage.cache_read_tokens,
        usage.cache_write_tokens,
        usage.cache_write_5m_tokens,
        usage.cache_write_1h_tokens,
        usage.output_tokens,
        usage.reasoning_tokens,
        int(usage.cache_reported),
        cost_p,
        base_p,
        price_text,
        latency_ms,
        ttft_ms,
        int(bool(stream)),
        json.dumps(list(usage.flags)) if usage.flags else None,
        json.dumps(dict(metadata), sort_keys=True, default=str) if metadata else None,
        prompt if (store_prompts and prompt is not None) else None,
        *miss,
    )


def usage_from_row(row: Mapping[str, Any], model: str | None = None) -> Usage:
    """The :class:`Usage` of a stored row (a mapping of column name to value); the write
    tokens not split by TTL are put under ``"other"``."""
    w5, w1, w = (
        int(row["cache_write_5m_tokens"]),
        int(row["cache_write_1h_tokens"]),
        int(row["cache_write_tokens"]),
    )
    ttl = {"5m": w5, "1h": w1}
    if w - w5 - w1:
        ttl["other"] = w - w5 - w1
    flags = row.get("flags")
    return Usage(
        uncached_input_tokens=int(row["uncached_input_tokens"]),
        cache_read_tokens=int(row["cache_read_tokens"]),
        cache_write_tokens=w,
        output_tokens=int(row["output_tokens"]),
        cache_write_by_ttl=ttl,
        cache_reported=bool(row["cache_reported"]),
        reasoning_tokens=row.get("reasoning_tokens"),
        provider=row["provider"],
        model=model if model is not None else row.get("model"),
        flags=tuple(json.loads(flags)) if flags else (),
    )


def _usd(pusd: int | None) -> Decimal | None:
    return None if pusd is None else Decimal(pusd) / PICO


def record_from_row(row: Mapping[str, Any]) -> Record:
    """The :class:`Record` of a stored row (a mapping of column name to value)."""
    return Record(
        record_id=row["record_id"],
        ts=row["ts"],
        provider=row["provider"],
        model=row["model"],
        api=row["api"],
        prefix_hash=row["prefix_hash"],
        usage=usage_from_row(row),
        cost=_usd(row["cost_pusd"]),
        baseline=_usd(row["baseline_pusd"]),
        latency_ms=row["latency_ms"],
        ttft_ms=row["ttft_ms"],
        stream=bool(row["stream"]),
        metadata=json.loads(row["metadata"]) if row["metadata"] else {},
        prompt_text=row["prompt_text"],
        miss_cause=row["miss_cause"],
        miss_path=row["miss_path"],
        matched_prefix_tokens=row["matched_prefix_tokens"],
        miss_offset_chars=row["miss_offset_chars"],
        miss_offset_tokens=row["miss_offset_tokens"],
        miss_detail=row["miss_detail"],
        miss_excerpt=tuple(json.loads(row["miss_excerpt"])) if row["miss_excerpt"] else None,
        lineage=row["lineage"],
    )
