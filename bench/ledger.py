"""Ledger throughput: records/s into ``promptcache.Tracker`` and ``summary()`` time.

Run:  .venv/bin/python bench/ledger.py [--summary-rows 1000000] [--batched 200000]

Measures (single process, SQLite in WAL mode, synchronous=NORMAL, on a temp file):

1. unbatched ``Tracker.record()`` (one committed transaction per record);
2. batched ``Tracker.record_many()`` (1,000 records per transaction);
3. ``Tracker.summary()`` over N records (default 1,000,000), by model / day / overall.

The peer, measured in the same run, is raw ``sqlite3`` doing the same work with no
promptcache code: the same rows inserted with ``executemany`` (rows prepared in advance,
so no cost or usage objects are computed), and the same GROUP BY query. The ratio column
is promptcache time / peer time (1.0 = no overhead). Targets from the issue: >= 20,000
records/s batched; summary under 2 s at 1,000,000 records.
"""

from __future__ import annotations

import argparse
import os
import random
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from promptcache import Price, Tracker, Usage  # noqa: E402
from promptcache.ledger.schema import COLUMNS as _COLUMNS  # noqa: E402

PRICE = Price(input="3", output="15", cache_read="0.30", cache_write_5m="3.75", cache_write_1h="6")
MODELS = ["claude-sonnet-4-5", "claude-haiku-4-5", "gpt-4o", "gpt-4.1-mini"]


def usages(n: int, seed: int = 0) -> list[tuple[Usage, dict]]:
    rng = random.Random(seed)
    t0 = time.time() - 30 * 86400
    out = []
    for i in range(n):
        read = rng.choice((0, 1024, 2048, 4096))
        w = 0 if read else rng.choice((0, 1024))
        u = Usage(
            uncached_input_tokens=rng.randint(10, 500),
            cache_read_tokens=read,
            cache_write_tokens=w,
            cache_write_by_ttl={"5m": w} if w else {},
            output_tokens=rng.randint(1, 400),
        )
        out.append(
            (
                u,
                {
                    "model": MODELS[i % 4],
                    "provider": "anthropic",
                    "price": PRICE,
                    "prefix_hash": f"{rng.randrange(64):064x}",
                    "ts": t0 + i * (30 * 86400 / n),
                    "latency_ms": 100.0,
                },
            )
        )
    return out


def bench_unbatched(n: int) -> tuple[float, float]:
    items = usages(n)
    with tempfile.TemporaryDirectory() as d:
        t = Tracker(os.path.join(d, "l.db"))
        start = time.perf_counter()
        for u, kw in items:
            t.record(u, **kw)
        ours = time.perf_counter() - start
        rows = [t._row(u, **kw) for u, kw in items]
        t.close()
        peer = _raw_insert(os.path.join(d, "peer.db"), rows, batch=1)
    return n / ours, n / peer


def bench_batched(n: int, batch: int = 1000) -> tuple[float, float]:
    items = usages(n, seed=1)
    with tempfile.TemporaryDirectory() as d:
        t = Tracker(os.path.join(d, "l.db"))
        start = time.perf_counter()
        for i in range(0, n, batch):
            t.record_many(items[i : i + batch])
        ours = time.perf_counter() - start
        rows = [t._row(u, **kw) for u, kw in items]
        t.close()
        peer = _raw_insert(os.path.join(d, "peer.db"), rows, batch=batch)
    return n / ours, n / peer


def _raw_insert(path: str, rows: list[tuple], batch: int) -> float:
    t = Tracker(path)  # same schema and pragmas
    t.close()
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    sql = (
        f"INSERT OR IGNORE INTO requests ({', '.join(_COLUMNS)}) VALUES "
        f"({', '.join('?' * len(_COLUMNS))})"
    )
    start = time.perf_counter()
    for i in range(0, len(rows), batch):
        conn.execute("BEGIN IMMEDIATE")
        conn.executemany(sql, rows[i : i + batch])
        conn.execute("COMMIT")
    elapsed = time.perf_counter() - start
    conn.close()
    return elapsed


PEER_SQL = """SELECT {key}, COUNT(*), SUM(uncached_input_tokens), SUM(cache_read_tokens),
    SUM(cache_write_tokens), SUM(output_tokens), SUM(cost_pusd), SUM(baseline_pusd)
    FROM requests GROUP BY 1"""


def bench_summary(n: int) -> list[tuple[str, float, float]]:
    d = tempfile.mkdtemp()
    path = os.path.join(d, "l.db")
    t = Tracker(path)
    fill0 = time.perf_counter()
    chunk = 50_000
    for i in range(0, n, chunk):
        items = usages(min(chunk, n - i), seed=100 + i)
        t.record_many(items)
    print(f"  (filled {n:,} records in {time.perf_counter() - fill0:.1f} s)", file=sys.stderr)
    conn = sqlite3.connect(path)
    out = []
    for by, key in (("model", "model"), ("day", "day"), (None, "NULL")):
        t.summary(by=by)  # warm the page cache for both sides alike
        start = time.perf_counter()
        t.summary(by=by)
        ours = time.perf_counter() - start
        start = time.perf_counter()
        conn.execute(PEER_SQL.format(key=key)).fetchall()
        peer = time.perf_counter() - start
        out.append((str(by), ours, peer))
    conn.close()
    t.close()
    for f in Path(d).iterdir():
        f.unlink()
    os.rmdir(d)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--unbatched", type=int, default=5_000)
    ap.add_argument("--batched", type=int, default=200_000)
    ap.add_argument("--summary-rows", type=int, default=1_000_000)
    a = ap.parse_args()
    print(
        f"promptcache ledger benchmark (SQLite {sqlite3.sqlite_version}, WAL, synchronous=NORMAL)"
    )
    print(f"{'measure':38} {'promptcache':>14} {'raw sqlite3':>14} {'ratio':>7}")
    ours, peer = bench_unbatched(a.unbatched)
    print(f"{'record() unbatched, records/s':38} {ours:14,.0f} {peer:14,.0f} {peer / ours:7.2f}")
    ours, peer = bench_batched(a.batched)
    print(f"{'record_many() x1000, records/s':38} {ours:14,.0f} {peer:14,.0f} {peer / ours:7.2f}")
    for by, ours, peer in bench_summary(a.summary_rows):
        label = f"summary(by={by}) over {a.summary_rows:,}, s"
        print(f"{label:38} {ours:14.3f} {peer:14.3f} {ours / peer:7.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
