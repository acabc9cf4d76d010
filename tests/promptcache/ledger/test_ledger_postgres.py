"""The ledger on a real PostgreSQL server (started on loopback by .ci/services.sh).

Each test gets its own schema (``search_path`` in the URL), dropped afterwards.
Skipped, with the reason, when no server answers.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import uuid
from decimal import Decimal as D
from urllib.parse import quote

import pytest

from promptcache import Price, Tracker, Usage
from promptcache.ledger.tracker import SCHEMA_VERSION, LedgerError

pytestmark = pytest.mark.postgres

URL = os.environ.get(
    "PROMPTCACHE_TEST_POSTGRES_URL",
    "postgresql://promptcache:promptcache@127.0.0.1:5432/promptcache_test",
)
PRICE = Price(input="3", output="15", cache_read="0.30", cache_write_5m="3.75", cache_write_1h="6")


def _server_error() -> str | None:
    try:
        import psycopg
    except ImportError:
        return "psycopg is not installed (pip install 'psycopg[binary]')"
    try:
        psycopg.connect(URL, connect_timeout=3).close()
    except Exception as e:  # noqa: BLE001 - any failure means: no server to test against
        return (
            f"no PostgreSQL server at {URL.split('@')[-1]} ({str(e).strip().splitlines()[0]}); "
            "run .ci/services.sh as root to install and start one"
        )
    return None


_SKIP = _server_error()


@pytest.fixture
def pg_url():
    if _SKIP:
        pytest.skip(_SKIP)
    import psycopg

    schema = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(URL, autocommit=True) as c:
        c.execute(f"CREATE SCHEMA {schema}")
    sep = "&" if "?" in URL else "?"
    yield f"{URL}{sep}options={quote(f'-csearch_path={schema}')}"
    with psycopg.connect(URL, autocommit=True) as c:
        c.execute(f"DROP SCHEMA {schema} CASCADE")


def test_postgres_record_summary_and_records(pg_url):
    t = Tracker(pg_url)
    assert t.dialect.name == "postgresql" and t.schema_version == SCHEMA_VERSION
    # 100*3 + 900*0.3 + 10*15 = 300 + 270 + 150 = 720 micro-$; no cache 3000 + 150 = 3150
    t.record(
        Usage(
            uncached_input_tokens=100,
            cache_read_tokens=900,
            output_tokens=10,
            provider="anthropic",
            model="m",
        ),
        price=PRICE,
        prefix_hash="p",
        ts=1e9,
    )
    # 1000 1h-write: 1000*6 = 6000 micro-$; no cache 3000
    t.record(
        Usage(
            cache_write_tokens=1000,
            cache_write_by_ttl={"1h": 1000},
            provider="anthropic",
            model="m",
        ),
        price=PRICE,
        prefix_hash="p",
        ts=1e9 + 5,
        record_id="fixed",
    )
    t.record(
        Usage(cache_write_tokens=1000, cache_write_by_ttl={"1h": 1000}),
        price=PRICE,
        record_id="fixed",
    )  # a retry: ignored
    (s,) = t.summary(by="prefix_hash")
    assert (s.key, s.requests, s.cache_read_tokens, s.cache_write_tokens) == ("p", 2, 900, 1000)
    assert s.cost == D("0.00672") and s.baseline == D("0.00615") and s.saving == D("-0.00057")
    assert s.hit_rate == pytest.approx(900 / 2000)
    assert [r.key for r in t.summary(by="day")] == ["2001-09-09"]
    recs = t.records()
    assert [r.usage.cache_write_1h_tokens for r in recs] == [0, 1000]
    t.close()
    # a second Tracker on the same database sees the same ledger (no re-migration)
    assert Tracker(pg_url).count() == 2


def _pg_writer(url: str, k: int, n: int) -> None:
    t = Tracker(url)
    for i in range(n):
        t.record(
            Usage(uncached_input_tokens=1, cache_read_tokens=10, output_tokens=1),
            record_id=f"p{k}-{i}",
            price=PRICE,
        )
    t.close()


def test_postgres_many_processes(pg_url):
    Tracker(pg_url).close()
    ctx = mp.get_context("fork")
    procs = [ctx.Process(target=_pg_writer, args=(pg_url, k, 300)) for k in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(300)
        assert p.exitcode == 0
    t = Tracker(pg_url)
    (s,) = t.summary(by=None)
    assert s.requests == 1200
    # each: 1*3 + 10*0.3 + 1*15 = 21 micro-$ -> 1200 * 21 = 25,200 micro-$
    assert s.cost == D("0.0252")
    ids = {r.record_id for r in t.records()}
    assert ids == {f"p{k}-{i}" for k in range(4) for i in range(300)}


def test_postgres_bad_url_is_a_clear_error():
    if _SKIP:
        pytest.skip(_SKIP)
    with pytest.raises(LedgerError, match="cannot connect"):
        Tracker("postgresql://nobody:wrong@127.0.0.1:5432/promptcache_test", busy_timeout_s=3)


def test_postgres_summary_by_metadata_and_since(pg_url):
    t = Tracker(pg_url)
    t.record(
        Usage(uncached_input_tokens=10, cache_read_tokens=90),
        price=PRICE,
        metadata={"run": "built"},
        ts=1_000_000.0,
    )
    t.record(
        Usage(uncached_input_tokens=100), price=PRICE, metadata={"run": "naive"}, ts=1_000_100.0
    )
    rows = {r.key: r.hit_rate for r in t.summary(by="metadata.run")}
    assert rows == {"built": pytest.approx(0.9), "naive": 0.0}
    # since inside an hour: the partial hour comes from the records, not the rollup
    (s,) = t.summary(by=None, since=1_000_050.0)
    assert s.requests == 1 and s.uncached_input_tokens == 100
