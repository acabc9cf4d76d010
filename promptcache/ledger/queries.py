"""Queries over a ledger's :class:`~promptcache.ledger.store.Store`: counts, summaries, records,
hit-rate series, miss groups, stored digest chains and a request's predecessor.

Every function reads through ``store.cursor()`` and writes nothing. Time bounds accept what
:func:`~promptcache.ledger.records.parse_since` accepts; a bad one raises ``ValueError``.
"""

from __future__ import annotations

import json
import math
import re
import time
from collections.abc import Sequence
from datetime import datetime, timezone
from decimal import Decimal
from typing import Any

from promptcache.ledger.records import (
    PICO,
    Record,
    Summary,
    SummaryRow,
    parse_since,
    range_where,
    record_from_row,
    usage_from_row,
)
from promptcache.ledger.schema import COLUMNS, ROLLUP_SUMS, PgDialect
from promptcache.ledger.store import Store
from promptcache.misses.attribution import common_run
from promptcache.misses.cause import Observation
from promptcache.misses.digest_chain import DigestChain
from promptcache.misses.lineage import best_match

GROUPS = ("provider", "model", "prefix_hash", "day", "hour", "api", "miss_cause")

#: How far back (seconds) and how many recent requests of a model the ledger looks at for
#: a lineage's predecessor when this process has none in memory (24 h covers every
#: documented TTL but OpenAI's 24h retention's edge).
PREDECESSOR_WINDOW_S = 86400.0
PREDECESSOR_CANDIDATES = 64


def count(store: Store) -> int:
    """Number of stored requests."""
    cur = store.cursor()
    cur.execute("SELECT COUNT(*) FROM requests")
    return int(cur.fetchone()[0])


def usage_coverage(store: Store, since: Any = None) -> tuple[int, int, int]:
    """``(calls, calls whose response carried no usage, calls whose caching was reported)``
    since ``since`` (the calls a hit rate covers are the last)."""
    d = store.dialect
    where, params = range_where("ts", parse_since(since), None, d.param)
    cur = store.cursor()
    cur.execute(
        "SELECT COUNT(*), COALESCE(SUM(CASE WHEN flags LIKE '%usage_unknown%' THEN 1 ELSE 0 "
        f"END), 0), COALESCE(SUM(cache_reported), 0) FROM requests {where}",
        params,
    )
    n, unknown, reported = cur.fetchone()
    return int(n), int(unknown), int(reported)


# -- summaries -----------------------------------------------------------------------


def summary(store: Store, by: str | None, since: Any, until: Any) -> Summary:
    """See :meth:`promptcache.Tracker.summary`."""
    rows = summary_rows(store, by, since, until)

    def total() -> SummaryRow | None:
        overall = rows if by is None else summary_rows(store, None, since, until)
        return overall[0] if overall else None

    return Summary(rows, by, total)


def _check_by(by: str | None) -> str | None:
    """The metadata key of ``by="metadata.KEY"`` (None for the other groupings); raises
    ``ValueError`` for an unknown grouping or a bad key."""
    meta_key = by[len("metadata.") :] if by and by.startswith("metadata.") else None
    if meta_key is not None and not re.fullmatch(r"[A-Za-z0-9_]{1,64}", meta_key):
        raise ValueError(f"by={by!r}: a metadata key is letters, digits and _")
    if by is not None and by not in GROUPS and meta_key is None:
        raise ValueError(f"by={by!r}: use one of {', '.join(GROUPS)}, metadata.KEY or None")
    return meta_key


def _plan(
    by: str | None, meta_key: str | None, lo: float | None, hi: float | None
) -> tuple[bool, int | None, int | None, list[tuple[float | None, float | None]]]:
    """Which part of ``[lo, hi)`` the hourly rollup answers (whole hours ``[h_lo, h_hi)``,
    when ``use_rollup``) and which time ranges scan records (the partial hours at the edges,
    or everything for groupings the rollup does not hold)."""
    h_lo = None if lo is None else math.ceil(lo / 3600)
    h_hi = None if hi is None else math.floor(hi / 3600)
    if meta_key is not None or by == "miss_cause":  # not in the rollup: scan records
        return False, h_lo, h_hi, [(lo, hi)]
    if h_lo is not None and h_hi is not None and h_lo >= h_hi:
        return False, h_lo, h_hi, [(lo, hi)]
    raw: list[tuple[float | None, float | None]] = []
    if lo is not None and h_lo is not None and lo < h_lo * 3600:
        raw.append((lo, h_lo * 3600))
    if hi is not None and h_hi is not None and h_hi * 3600 < hi:
        raw.append((h_hi * 3600, hi))
    return True, h_lo, h_hi, raw


def summary_rows(store: Store, by: str | None, since: Any, until: Any) -> list[SummaryRow]:
    """The rows of :func:`summary`: whole hours from the rollup, edges from the records."""
    meta_key = _check_by(by)
    use_rollup, h_lo, h_hi, raw = _plan(by, meta_key, parse_since(since), parse_since(until))
    acc: dict[Any, list] = {}

    def add(key: Any, vals: Sequence[Any]) -> None:
        a = acc.setdefault(key, [0] * 12 + [0.0, 0])
        for i, v in enumerate(vals):
            if v is not None:
                a[i] += float(v) if i == 12 else int(v)

    if use_rollup:
        for k, vals in _rollup_sums(store, by, h_lo, h_hi):
            add(k, vals)
    for r_lo, r_hi in raw:
        for k, vals in _record_sums(store, by, meta_key, r_lo, r_hi):
            add(k, vals)
    out = [_summary_row(by, k, a) for k, a in acc.items() if a[0] != 0]
    if by in ("day", "hour"):
        out.sort(key=lambda s: s.key or "")
    else:
        out.sort(key=lambda s: (-s.cost, -s.requests, s.key or ""))
    return out


def _rollup_sums(
    store: Store, by: str | None, h_lo: int | None, h_hi: int | None
) -> list[tuple[Any, Sequence[Any]]]:
    d = store.dialect
    key = {None: "NULL", "day": "hour / 24", "hour": "hour"}.get(by, by)
    where, params = range_where("hour", h_lo, h_hi, d.param)
    sums = ", ".join(f"SUM({c})" for c in ROLLUP_SUMS)
    cur = store.cursor()
    cur.execute(f"SELECT {key} AS k, {sums} FROM rollup {where} GROUP BY k", params)
    out = []
    for r in cur.fetchall():
        k = r[0]
        if by == "day":
            k = datetime.fromtimestamp(int(k) * 86400, timezone.utc).strftime("%Y-%m-%d")
        elif by == "hour":
            k = int(k)
        elif by is not None and k == "":
            k = None
        out.append((k, r[1:]))
    return out


def _record_sums(
    store: Store, by: str | None, meta_key: str | None, lo: float | None, hi: float | None
) -> list[tuple[Any, Sequence[Any]]]:
    d = store.dialect
    key = {"hour": d.hour_expr, None: "NULL"}.get(by, by)
    if meta_key is not None:
        key = d.meta_expr.format(key=meta_key)
    where, params = range_where("ts", lo, hi, d.param)
    cur = store.cursor()
    cur.execute(
        f"""SELECT {key} AS k, COUNT(*),
        SUM(uncached_input_tokens), SUM(cache_read_tokens), SUM(cache_write_tokens),
        SUM(output_tokens), SUM(cache_reported * cache_read_tokens),
        SUM(cache_reported * (uncached_input_tokens + cache_read_tokens
                              + cache_write_tokens)),
        COUNT(*) - SUM(cache_reported), SUM(cost_pusd), SUM(baseline_pusd),
        COUNT(*) - COUNT(cost_pusd), SUM(cache_reported * {d.is_zero_read}),
        SUM(latency_ms), COUNT(latency_ms)
        FROM requests {where}
        GROUP BY k""",
        params,
    )
    return [
        (int(r[0]) if by == "hour" and r[0] is not None else r[0], r[1:]) for r in cur.fetchall()
    ]


def _summary_row(by: str | None, k: Any, a: list[Any]) -> SummaryRow:
    """One :class:`SummaryRow` from an accumulator in :data:`ROLLUP_SUMS` order."""
    if by == "hour" and k is not None:
        k = datetime.fromtimestamp(int(k) * 3600, timezone.utc).strftime("%Y-%m-%dT%H:00Z")
    uncached, read, write, output = a[1], a[2], a[3], a[4]
    cost_p, base_p = Decimal(a[8]) / PICO, Decimal(a[9]) / PICO
    return SummaryRow(
        key=None if k is None else str(k),
        requests=a[0],
        uncached_input_tokens=uncached,
        cache_read_tokens=read,
        cache_write_tokens=write,
        output_tokens=output,
        prompt_tokens=uncached + read + write,
        hit_rate=(a[5] / a[6]) if a[6] else None,
        unreported_requests=a[7],
        cost=cost_p,
        baseline=base_p,
        saving=base_p - cost_p,
        unpriced_requests=a[10],
        misses=a[11],
        mean_latency_ms=(a[12] / a[13]) if a[13] else None,
    )


# -- records -------------------------------------------------------------------------


def records(store: Store, since: Any = None, limit: int | None = None) -> list[Record]:
    """Stored requests, oldest first (``limit``: the most recent N)."""
    d = store.dialect
    sql = f"SELECT {', '.join(COLUMNS)} FROM requests"
    params: list[Any] = []
    lo = parse_since(since)
    if lo is not None:
        sql += f" WHERE ts >= {d.param}"
        params.append(lo)
    sql += " ORDER BY ts DESC, id DESC"
    if limit is not None:
        sql += f" LIMIT {int(limit)}"
    cur = store.cursor()
    cur.execute(sql, params)
    return [record_from_row(dict(zip(COLUMNS, r))) for r in reversed(cur.fetchall())]


# -- report helpers (token counts only: prices play no part) -------------------------


def time_span(store: Store, since: Any = None) -> tuple[float, float] | None:
    """``(first, last)`` request time (Unix seconds) since ``since``; None if none."""
    where, params = range_where("ts", parse_since(since), None, store.dialect.param)
    cur = store.cursor()
    cur.execute(f"SELECT MIN(ts), MAX(ts) FROM requests {where}", params)
    lo, hi = cur.fetchone()
    return None if lo is None else (float(lo), float(hi))


def hit_series(store: Store, bucket_s: int, since: Any = None) -> list[tuple[float, int, int]]:
    """See :meth:`promptcache.Tracker.hit_series`."""
    if bucket_s < 1:
        raise ValueError("bucket_s must be >= 1 second")
    d = store.dialect
    where, params = range_where("ts", parse_since(since), None, d.param)
    where = (where + " AND" if where else "WHERE") + " cache_reported = 1"
    bucket = (
        f"CAST(FLOOR(ts / {int(bucket_s)}) AS BIGINT)"
        if d is PgDialect
        else (f"CAST(ts / {int(bucket_s)} AS INTEGER)")
    )
    cur = store.cursor()
    cur.execute(
        f"""SELECT {bucket} AS b, SUM(cache_read_tokens),
        SUM(uncached_input_tokens + cache_read_tokens + cache_write_tokens)
        FROM requests {where} GROUP BY b ORDER BY b""",
        params,
    )
    return [(float(b) * bucket_s, int(r), int(p)) for b, r, p in cur.fetchall()]


def hit_counts(
    store: Store, by: str | None, min_share: float, since: Any = None
) -> dict[str | None, tuple[int, int]]:
    """See :meth:`promptcache.Tracker.hit_counts`."""
    if by is not None and by not in ("provider", "model", "prefix_hash", "api"):
        raise ValueError(f"by={by!r}: use provider, model, prefix_hash, api or None")
    if not 0 < min_share <= 1:
        raise ValueError("min_share must be in (0, 1]")
    d = store.dialect
    where, params = range_where("ts", parse_since(since), None, d.param)
    where = (where + " AND" if where else "WHERE") + " cache_reported = 1"
    key = "NULL" if by is None else by
    cur = store.cursor()
    cur.execute(
        f"""SELECT {key} AS k, COUNT(*), SUM(CASE WHEN cache_read_tokens >= {d.param} *
        (uncached_input_tokens + cache_read_tokens + cache_write_tokens)
        AND cache_read_tokens > 0 THEN 1 ELSE 0 END)
        FROM requests {where} GROUP BY k""",
        [float(min_share), *params],
    )
    return {k: (int(h), int(n)) for k, n, h in cur.fetchall()}


# -- miss attribution ----------------------------------------------------------------


def miss_groups(store: Store, since: Any = None, until: Any = None) -> list[dict[str, Any]]:
    """See :meth:`promptcache.Tracker.miss_groups`."""
    d = store.dialect
    where, params = range_where("ts", parse_since(since), parse_since(until), d.param)
    where = (where + " AND " if where else "WHERE ") + "miss_cause IS NOT NULL"
    cur = store.cursor()
    cur.execute(
        "SELECT miss_cause, miss_path, model, COUNT(*), "
        "SUM(uncached_input_tokens + cache_read_tokens + cache_write_tokens), "
        "SUM(cache_read_tokens), COALESCE(SUM(matched_prefix_tokens), 0), MAX(ts) "
        f"FROM requests {where} GROUP BY miss_cause, miss_path, model",
        params,
    )
    out = []
    for cause, path, model, n, prompt, read, matched, last in cur.fetchall():
        out.append(
            {
                "cause": cause,
                "path": path,
                "model": model,
                "requests": int(n),
                "prompt_tokens": int(prompt or 0),
                "cache_read_tokens": int(read or 0),
                "missed_tokens": int(prompt or 0) - int(read or 0),
                "matched_tokens": int(matched or 0),
                "last_ts": float(last),
            }
        )
    out.sort(key=lambda g: (-g["missed_tokens"], -g["requests"], g["cause"], g["path"] or ""))
    return out


def _atoms(store: Store, digests: Sequence[str]) -> dict[str, Any]:
    """The stored atoms of each of ``digests`` (missing ones left out)."""
    d = store.dialect
    cur = store.cursor()
    atoms: dict[str, Any] = {}
    for i in range(0, len(digests), 500):
        part = list(digests[i : i + 500])
        cur.execute(
            f"SELECT digest, atoms FROM segments WHERE digest IN "
            f"({', '.join([d.param] * len(part))})",
            part,
        )
        for digest, text in cur.fetchall():
            atoms[digest] = json.loads(text)
    return atoms


def chain(store: Store, record_id: str) -> DigestChain | None:
    """The stored digest chain of a record (with the atoms of its segments), or None."""
    cur = store.cursor()
    cur.execute(f"SELECT chain FROM requests WHERE record_id = {store.dialect.param}", (record_id,))
    row = cur.fetchone()
    if row is None or row[0] is None:
        return None
    data = json.loads(row[0])
    digests = sorted({seg[1] for seg in data["segments"]})
    return DigestChain.from_json(data, _atoms(store, digests))


_PRED_COLS = (
    "ts",
    "chain",
    "uncached_input_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "cache_write_5m_tokens",
    "cache_write_1h_tokens",
    "output_tokens",
    "cache_reported",
    "provider",
    "lineage",
)


def predecessor(
    store: Store,
    chain: DigestChain,
    *,
    model: str | None,
    before: float | None = None,
    lineage: str | None = None,
) -> tuple[Observation, bool] | None:
    """See :meth:`promptcache.Tracker.predecessor`."""
    if not model or not chain.segments:
        return None
    found = _best_predecessor(store, chain, model, before, lineage)
    if found is None:
        return None
    (run, ts, data, row), same = found
    segs = data["segments"]
    want = [segs[run][1]] if run < len(segs) else []
    prev_chain = DigestChain.from_json(data, _atoms(store, want))
    usage = usage_from_row(row, model=model)
    retention = data.get("retention")
    obs = Observation(prev_chain, usage, ts, retention if isinstance(retention, str) else None)
    return obs, same


def _best_predecessor(
    store: Store, chain: DigestChain, model: str, before: float | None, lineage: str | None
) -> tuple[tuple[int, float, Any, dict[str, Any]], bool] | None:
    """Among the latest candidates: the latest of ``lineage`` (with True), else the best by
    shared prefix (:func:`promptcache.misses.lineage.best_match`, with whether it is the same
    conversation); None if none shares any."""
    d = store.dialect
    now = time.time() if before is None else float(before)
    cur = store.cursor()
    cur.execute(
        f"SELECT {', '.join(_PRED_COLS)} FROM requests WHERE ts >= {d.param} AND "
        f"ts <= {d.param} AND model = {d.param} AND chain IS NOT NULL ORDER BY ts DESC LIMIT "
        f"{int(PREDECESSOR_CANDIDATES)}",
        (now - PREDECESSOR_WINDOW_S, now, model),
    )
    rows: list[tuple[list[str], float, dict[str, Any], dict[str, Any]]] = []
    for values in cur.fetchall():  # newest first
        row = dict(zip(_PRED_COLS, values))
        try:
            data = json.loads(row["chain"])
            digests = [seg[1] for seg in data["segments"]]
        except (ValueError, KeyError, TypeError, IndexError):
            continue
        if lineage is not None and row["lineage"] == lineage:
            return (common_run(chain.digests(), digests), float(row["ts"]), data, row), True
        rows.append((digests, float(row["ts"]), data, row))
    found = best_match(chain.digests(), ((r[0], r[1]) for r in rows))
    if found is None:
        return None
    i, how = found
    return (how.run, rows[i][1], rows[i][2], rows[i][3]), how.related
