"""The SQLite ledger: records, summaries, privacy, schema versions, concurrency, crashes."""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
from datetime import datetime, timezone
from decimal import Decimal as D

import pytest

from promptcache import Price, Tracker, Usage
from promptcache.ledger.tracker import SCHEMA_VERSION, LedgerError, parse_since

PRICE = Price(input="3", output="15", cache_read="0.30", cache_write_5m="3.75", cache_write_1h="6")


def _u(
    uncached=0,
    read=0,
    w5=0,
    w1=0,
    out=0,
    reported=True,
    provider="anthropic",
    model="claude-sonnet-4-5",
):
    ttl = {k: v for k, v in (("5m", w5), ("1h", w1)) if v}
    return Usage(
        uncached_input_tokens=uncached,
        cache_read_tokens=read,
        cache_write_tokens=w5 + w1,
        cache_write_by_ttl=ttl,
        output_tokens=out,
        cache_reported=reported,
        provider=provider,
        model=model,
    )


def test_record_and_summary_by_every_group(tmp_path):
    t = Tracker(tmp_path / "l.db")
    day1 = datetime(2026, 11, 27, 10, 30, tzinfo=timezone.utc).timestamp()
    day2 = datetime(2026, 11, 28, 23, 59, tzinfo=timezone.utc).timestamp()
    # A: 100 uncached + 900 read, 10 out: 100*3 + 900*0.3 + 10*15 = 300+270+150 = 720 micro-$;
    #    no cache 1000*3 + 150 = 3150
    t.record(_u(100, 900, out=10), prefix_hash="p1", ts=day1, api="messages")
    # B: 50 uncached + 1000 5m-write, 20 out: 150 + 3750 + 300 = 4200; no cache 3150+300 = 3450
    t.record(_u(50, w5=1000, out=20), prefix_hash="p1", ts=day1 + 60, api="messages")
    # C (openai_compatible, caching not reported): 400 prompt, 4 out, price in=1 out=2:
    #    400 + 8 = 408; no cache 408
    t.record(
        _u(400, out=4, reported=False, provider="local", model="smol"),
        price=Price(input="1", output="2"),
        prefix_hash="p2",
        ts=day2,
    )
    # D: no price known -> unpriced
    t.record(_u(10, 30, out=1, provider="local", model="no-such-model"), ts=day2)
    assert t.count() == 4

    (total,) = t.summary(by=None)
    assert total.requests == 4
    assert total.prompt_tokens == 1000 + 1050 + 400 + 40
    # token-weighted hit rate over the REPORTED requests only (A, B, D):
    # reads 900 + 0 + 30 = 930 over prompts 1000 + 1050 + 40 = 2090
    assert total.hit_rate == pytest.approx(930 / 2090, rel=1e-12)
    assert total.unreported_requests == 1 and total.unpriced_requests == 1
    assert total.cost == D("0.005328")  # 720 + 4200 + 408 micro-$
    assert total.baseline == D("0.007008")  # 3150 + 3450 + 408
    assert total.saving == D("0.00168")
    assert total.misses == 1  # B was reported with 0 reads

    by_model = {r.key: r for r in t.summary(by="model")}
    assert by_model["claude-sonnet-4-5"].cost == D("0.00492")
    assert by_model["smol"].hit_rate is None  # unknown, not 0
    assert [r.key for r in t.summary(by="day")] == ["2026-11-27", "2026-11-28"]
    assert [r.key for r in t.summary(by="hour")] == ["2026-11-27T10:00Z", "2026-11-28T23:00Z"]
    by_prefix = {r.key: r.requests for r in t.summary(by="prefix_hash")}
    assert by_prefix == {"p1": 2, "p2": 1, None: 1}
    assert {r.key for r in t.summary(by="provider")} == {"anthropic", "local"}
    # since/until bounds
    assert t.summary(by=None, since=day2)[0].requests == 2
    assert t.summary(by=None, until=day2)[0].requests == 2
    with pytest.raises(ValueError, match="by="):
        t.summary(by="colour")

    recs = t.records()
    assert [r.prefix_hash for r in recs] == ["p1", "p1", "p2", None]
    assert recs[1].usage.cache_write_5m_tokens == 1000 and recs[1].cost == D("0.0042")
    assert recs[2].usage.cache_reported is False and recs[2].usage.hit_rate is None
    assert recs[3].cost is None
    t.close()


def test_record_id_makes_retries_idempotent(tmp_path):
    t = Tracker(tmp_path / "l.db")
    t.record(_u(1, out=1), record_id="abc", price=PRICE)
    t.record(_u(1, out=1), record_id="abc", price=PRICE)
    t.record_many([(_u(1), {"record_id": "abc"}), (_u(2), {"record_id": "def"})])
    assert t.count() == 2


def test_prompt_text_is_never_stored_unless_asked(tmp_path):
    secret = "TOP-SECRET-PROMPT-7f3a"
    t = Tracker(tmp_path / "a.db")
    t.record(_u(5, out=1), prompt=secret, price=PRICE)
    t.close()
    raw = b"".join(p.read_bytes() for p in tmp_path.glob("a.db*"))
    assert secret.encode() not in raw
    t2 = Tracker(tmp_path / "b.db", store_prompts=True)
    t2.record(_u(5, out=1), prompt=secret, price=PRICE)
    assert t2.records()[0].prompt_text == secret


def test_wal_mode_schema_version_and_refusals(tmp_path):
    path = tmp_path / "l.db"
    t = Tracker(path)
    t.record(_u(1), price=PRICE)
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert t.schema_version == SCHEMA_VERSION
    t.close()
    Tracker(path).close()  # re-opening migrates nothing and keeps the data
    assert Tracker(path).count() == 1
    conn.execute(
        "UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION + 1),)
    )
    conn.commit()
    conn.close()
    with pytest.raises(LedgerError, match="newer"):
        Tracker(path)
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"this is not a database" * 100)
    with pytest.raises(LedgerError, match="not a database"):
        Tracker(junk)
    with pytest.raises(LedgerError, match="file path"):
        Tracker(":memory:")


def test_default_path_honours_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("PROMPTCACHE_LEDGER", str(tmp_path / "env.db"))
    t = Tracker()
    assert t.path == str(tmp_path / "env.db")


def test_parse_since():
    now = 1_000_000.0
    assert parse_since("7d", now) == now - 7 * 86400
    assert parse_since("30m", now) == now - 1800
    assert parse_since("2026-11-01", now) == datetime(2026, 11, 1, tzinfo=timezone.utc).timestamp()
    with pytest.raises(ValueError, match="duration"):
        parse_since("last tuesday", now)


def test_threads_share_one_tracker(tmp_path):
    t = Tracker(tmp_path / "l.db")

    def work(k):
        for i in range(250):
            t.record(_u(1, 2, out=3), record_id=f"t{k}-{i}", price=PRICE)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    (s,) = t.summary(by=None)
    assert s.requests == 2000 and s.cache_read_tokens == 4000 and s.output_tokens == 6000


def _writer(path: str, k: int, n: int) -> None:
    t = Tracker(path)
    for i in range(n):
        t.record(_u(1, 10, out=1), record_id=f"p{k}-{i}", price=PRICE, metadata={"proc": k})
    t.close()


def test_eight_processes_two_thousand_records_each(tmp_path):
    path = str(tmp_path / "l.db")
    Tracker(path).close()
    ctx = mp.get_context("fork")
    procs = [ctx.Process(target=_writer, args=(path, k, 2000)) for k in range(8)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(300)
        assert p.exitcode == 0
    conn = sqlite3.connect(path)
    ids = [r[0] for r in conn.execute("SELECT record_id FROM requests")]
    assert len(ids) == 16_000  # none lost
    assert len(set(ids)) == 16_000  # none duplicated
    assert set(ids) == {f"p{k}-{i}" for k in range(8) for i in range(2000)}
    (s,) = Tracker(path).summary(by=None)
    # each record: 1*3 + 10*0.3 + 1*15 = 21 micro-$; 16,000 records -> $0.336
    assert s.cost == D("0.336")


CRASH_WRITER = textwrap.dedent("""
    import sys
    from promptcache import Tracker, Usage, Price
    t = Tracker(sys.argv[1])
    price = Price(input="3", output="15", cache_read="0.30")
    batch = sys.argv[2] == "batch"
    i = 0
    while True:
        if batch:
            ids = t.record_many([(Usage(uncached_input_tokens=1, output_tokens=1),
                                  {"record_id": f"r{i + j}", "price": price}) for j in range(50)])
            i += 50
        else:
            ids = [t.record(Usage(uncached_input_tokens=1, output_tokens=1), record_id=f"r{i}",
                            price=price)]
            i += 1
        sys.stdout.write("".join(x + "\\n" for x in ids))
        sys.stdout.flush()
""")


@pytest.mark.parametrize("mode", ["single", "batch"])
def test_sigkill_mid_stream_keeps_every_acknowledged_record(tmp_path, mode):
    path = tmp_path / "crash.db"
    script = tmp_path / "writer.py"
    script.write_text(CRASH_WRITER)
    proc = subprocess.Popen(
        [sys.executable, str(script), str(path), mode], stdout=subprocess.PIPE, text=True
    )
    acked = []
    deadline = time.monotonic() + 120
    while len(acked) < 400 and time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        acked.append(line.strip())
    os.kill(proc.pid, signal.SIGKILL)  # mid-stream: the writer is in its loop
    proc.wait()
    proc.stdout.close()
    assert proc.returncode == -signal.SIGKILL
    assert len(acked) >= 400, "the writer did not acknowledge enough records"
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    stored = {r[0] for r in conn.execute("SELECT record_id FROM requests")}
    missing = set(acked) - stored
    assert not missing, f"{len(missing)} acknowledged records lost"
    assert Tracker(path).count() == len(stored)


def test_migration_from_schema_1_keeps_records_and_prices(tmp_path):
    from promptcache.ledger.schema import MIGRATIONS as _MIGRATIONS
    from promptcache.ledger.schema import Dialect as _Dialect

    path = tmp_path / "v1.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
    for stmt in _MIGRATIONS[0]:
        conn.execute(stmt.format(**_Dialect.ddl))
    conn.execute("INSERT INTO meta VALUES ('schema_version', '1')")
    price = '{"input": "3", "model": "m"}'
    for i in range(3):
        conn.execute(
            "INSERT INTO requests (record_id, ts, day, model, uncached_input_tokens, "
            "cache_read_tokens, cache_write_tokens, cache_write_5m_tokens, cache_write_1h_tokens, "
            "output_tokens, cache_reported, cost_pusd, baseline_pusd, price_json) "
            "VALUES (?, 0, '1970-01-01', 'm', 10, 0, 0, 0, 0, 1, 1, 45000000, 45000000, ?)",
            (f"r{i}", price),
        )
    conn.commit()
    conn.close()
    # migrates 1 -> 2 (prices table) -> 3 (hourly rollup, backfilled) -> 4 -> 5 (attribution)
    t = Tracker(path)
    assert t.schema_version == SCHEMA_VERSION == 5
    conn = sqlite3.connect(path)
    cols = [r[1] for r in conn.execute("PRAGMA table_info(requests)")]
    assert "price_json" not in cols and "price_id" in cols
    assert conn.execute("SELECT price_json FROM prices").fetchall() == [(price,)]
    assert {r[0] for r in conn.execute("SELECT price_id FROM requests")} == {1}
    (s,) = t.summary(by=None)
    assert s.requests == 3 and s.cost == D("0.000135")  # 3 x 45,000,000 pico-$
    t.record(_u(1, out=1), price=PRICE)  # new prices land in the prices table
    assert conn.execute("SELECT COUNT(*) FROM prices").fetchone()[0] == 2


def test_summary_from_rollup_equals_brute_force_over_records(tmp_path):
    """summary() reads whole hours from the rollup and scans only the partial edge hours;
    for random bounds it must equal a plain aggregation of the stored records."""
    import random

    rng = random.Random(7)
    t = Tracker(tmp_path / "l.db")
    t0 = 1_700_000_000.0
    items = []
    for i in range(600):
        reported = rng.random() > 0.1
        read = rng.choice((0, 0, 512, 2048)) if reported else 0
        u = _u(
            rng.randint(1, 300),
            read,
            w5=rng.choice((0, 256)) if reported and not read else 0,
            out=rng.randint(1, 50),
            reported=reported,
            provider=rng.choice("ab"),
            model=rng.choice(["m1", "m2", "no-price-model"]),
        )
        items.append(
            (
                u,
                {
                    "ts": t0 + rng.uniform(0, 5 * 86400),
                    "record_id": f"r{i}",
                    "price": PRICE if u.model != "no-price-model" else None,
                    "prefix_hash": rng.choice(["p", "q", None]),
                    "latency_ms": rng.uniform(10, 900),
                },
            )
        )
    for i in range(0, 600, 97):
        t.record_many(items[i : i + 97])
    t.record_many(items[:50])  # retries: ignored, not double counted in the rollup
    recs = t.records()
    assert len(recs) == 600

    def brute(by, lo, hi):
        groups = {}
        for r in recs:
            if (lo is not None and r.ts < lo) or (hi is not None and r.ts >= hi):
                continue
            k = {
                "model": r.model,
                "prefix_hash": r.prefix_hash,
                "provider": r.provider,
                "day": datetime.fromtimestamp(r.ts, timezone.utc).strftime("%Y-%m-%d"),
                None: None,
            }[by]
            g = groups.setdefault(
                k, {"n": 0, "read": 0, "prompt": 0, "rr": 0, "rp": 0, "cost": D(0), "lat": 0.0}
            )
            g["n"] += 1
            g["read"] += r.usage.cache_read_tokens
            g["prompt"] += r.usage.prompt_tokens
            if r.usage.cache_reported:
                g["rr"] += r.usage.cache_read_tokens
                g["rp"] += r.usage.prompt_tokens
            g["cost"] += r.cost or 0
            g["lat"] += r.latency_ms
        return groups

    for _ in range(25):
        lo = t0 + rng.uniform(-3600, 5 * 86400) if rng.random() < 0.8 else None
        hi = (lo or t0) + rng.uniform(0, 3 * 86400) if rng.random() < 0.7 else None
        for by in ("model", "prefix_hash", "day", None):
            want = brute(by, lo, hi)
            got = {r.key: r for r in t.summary(by=by, since=lo, until=hi)}
            assert set(got) == {k if k is None else str(k) for k in want}
            for k, g in want.items():
                row = got[k if k is None else str(k)]
                assert (row.requests, row.cache_read_tokens, row.prompt_tokens) == (
                    g["n"],
                    g["read"],
                    g["prompt"],
                )
                assert row.cost == g["cost"]
                assert row.hit_rate == (pytest.approx(g["rr"] / g["rp"]) if g["rp"] else None)
                assert row.mean_latency_ms == pytest.approx(g["lat"] / g["n"])


def test_summary_by_metadata_key(tmp_path):
    t = Tracker(tmp_path / "l.db")
    t.record(_u(10, 90, out=1), price=PRICE, metadata={"demo_run": "built"})
    t.record(_u(100, out=1), price=PRICE, metadata={"demo_run": "naive"})
    t.record(_u(100, out=1), price=PRICE, metadata={"demo_run": "naive"})
    t.record(_u(5, out=1), price=PRICE)
    rows = {r.key: r for r in t.summary(by="metadata.demo_run")}
    assert {k: r.requests for k, r in rows.items()} == {"built": 1, "naive": 2, None: 1}
    assert rows["built"].hit_rate == pytest.approx(0.9) and rows["naive"].hit_rate == 0.0
    with pytest.raises(ValueError, match="metadata key"):
        t.summary(by="metadata.x'; DROP TABLE requests; --")
