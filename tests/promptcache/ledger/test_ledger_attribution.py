"""Miss attribution in the ledger: the v4 -> v5 migration keeps every committed record, each
record carries its cause/path/matched tokens, summary() groups by cause, the predecessor is
found across processes by the longest common run of segment digests, no prompt text is
stored unless asked, and the same on PostgreSQL."""

from __future__ import annotations

import os
import sqlite3
import uuid
from urllib.parse import quote

import pytest

from promptcache import Tracker, Usage
from promptcache.ledger.schema import MIGRATIONS as _MIGRATIONS
from promptcache.ledger.schema import SCHEMA_VERSION
from promptcache.ledger.schema import Dialect as _Dialect

MODEL = "claude-sonnet-4-5"  # minimum 1,024 tokens (limits.py)
SYSTEM = "You are a meticulous travel planner; answer in metric units. SECRET-WORD. " * 80


def body(
    turns: int, *, stamp: str | None = None, extra_tool: bool = False, first: str = "q0"
) -> dict:
    tools = [
        {
            "name": "weather",
            "description": "Weather for a city.",
            "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
        }
    ]
    if extra_tool:
        tools.append({"name": "news", "description": "News.", "input_schema": {"type": "object"}})
    text = (f"Current time: {stamp}. " if stamp else "") + SYSTEM

    def user(t: str) -> dict:
        return {"role": "user", "content": [{"type": "text", "text": t}]}

    msgs: list[dict] = [user(first)]
    for i in range(turns):
        msgs += [{"role": "assistant", "content": f"a{i}"}, user(f"q{i + 1}")]
    # the marker moves to the newest message each turn (the agent loop's breakpoint)
    msgs[-1]["content"][0]["cache_control"] = {"type": "ephemeral"}
    return {
        "model": MODEL,
        "max_tokens": 16,
        "tools": tools,
        "system": [{"type": "text", "text": text}],
        "messages": msgs,
    }


def u(uncached: int, read: int, write: int) -> Usage:
    return Usage(
        uncached_input_tokens=uncached,
        cache_read_tokens=read,
        cache_write_tokens=write,
        cache_write_by_ttl={"5m": write} if write else {},
        provider="anthropic",
        model=MODEL,
    )


def play(t: Tracker, t0: float = 1_000_000.0) -> None:
    """cold, hit, tool list changed, hit, timestamp in the system prompt, pause past 5m."""
    t.record(u(3, 0, 1500), request=body(0), api="messages", ts=t0)
    t.record(u(3, 1500, 20), request=body(1), api="messages", ts=t0 + 10)
    t.record(u(3, 0, 1560), request=body(2, extra_tool=True), api="messages", ts=t0 + 20)
    t.record(u(3, 1560, 20), request=body(3, extra_tool=True), api="messages", ts=t0 + 30)
    t.record(
        u(3, 0, 1600), request=body(4, extra_tool=True, stamp="09:14"), api="messages", ts=t0 + 40
    )
    t.record(
        u(3, 0, 1620), request=body(5, extra_tool=True, stamp="09:14"), api="messages", ts=t0 + 400
    )


EXPECTED = [
    ("cold", None),
    ("hit", None),
    ("prefix_changed", "$.tools[1]"),
    ("hit", None),
    ("prefix_changed", "$.system[0].text"),
    ("ttl_expired", None),
]


def check_played(t: Tracker) -> None:
    recs = t.records()
    assert [(r.miss_cause, r.miss_path) for r in recs] == EXPECTED
    changed = recs[4]
    # the previous system block had no timestamp: '{"type":"text","text":"' is shared
    shared = len('{"type":"text","text":"')
    tools_chars = sum(
        len(__import__("json").dumps(x, separators=(",", ":")))
        for x in body(4, extra_tool=True)["tools"]
    )
    assert changed.miss_offset_chars == tools_chars + shared
    assert 0 < changed.matched_prefix_tokens < 1600
    assert recs[1].matched_prefix_tokens >= 1500
    by = {row.key: row.requests for row in t.summary(by="miss_cause")}
    assert by == {"cold": 1, "hit": 2, "prefix_changed": 2, "ttl_expired": 1}


def test_records_carry_cause_path_and_summary_groups_by_cause(tmp_path) -> None:
    t = Tracker(tmp_path / "l.db")
    play(t)
    check_played(t)
    assert all(r.miss_excerpt is None for r in t.records())


def test_no_prompt_text_stored_by_default_and_excerpts_when_asked(tmp_path) -> None:
    path = tmp_path / "l.db"
    t = Tracker(path)
    play(t)
    t.close()
    for f in os.listdir(tmp_path):
        assert b"SECRET-WORD" not in (tmp_path / f).read_bytes()
    t2 = Tracker(tmp_path / "p.db", store_prompts=True)
    play(t2)
    before, after = t2.records()[4].miss_excerpt
    assert "Current time: 09:14" in after and "Current time" not in before


def test_the_predecessor_is_found_across_processes(tmp_path) -> None:
    path = tmp_path / "l.db"
    first = Tracker(path)
    first.record(u(3, 0, 1500), request=body(0), api="messages", ts=1000.0)
    first.record(u(3, 1500, 20), request=body(1), api="messages", ts=1010.0)
    first.close()
    # another process: nothing in memory, the ledger's chain with the longest common run
    second = Tracker(path)
    second.record(u(3, 0, 1540), request=body(2, stamp="10:00"), api="messages", ts=1020.0)
    rec = second.records()[-1]
    assert (rec.miss_cause, rec.miss_path) == ("prefix_changed", "$.system[0].text")
    chain = second.chain(rec.record_id)
    assert chain is not None and chain.segments[0].path == "$.tools[0]"
    assert chain.atoms[chain.segments[0].digest][0].path == ".name"


def test_session_keys_keep_conversations_apart(tmp_path) -> None:
    def two_conversations(t: Tracker, keys: tuple[str | None, str | None]) -> list:
        a, b = keys
        t.record(u(3, 0, 1500), request=body(0), api="messages", ts=1000.0, lineage=a)
        t.record(u(3, 0, 1500), request=body(0, first="Hi"), api="messages", ts=1001, lineage=b)
        t.record(u(3, 1500, 20), request=body(1), api="messages", ts=1002.0, lineage=a)
        t.record(u(3, 1500, 20), request=body(1, first="Hi"), api="messages", ts=1003, lineage=b)
        return [(r.miss_cause, r.miss_path) for r in t.records()]

    # session keys: a new conversation is cold, each continues its own
    apart = two_conversations(Tracker(tmp_path / "two.db"), ("a", "b"))
    assert apart == [("cold", None), ("cold", None), ("hit", None), ("hit", None)]
    # without keys the predecessor is found by shared prefix (promptcache.misses.lineage):
    # b's first request shares only the head with a's (another conversation: cold), and each
    # later request continues the conversation it contains whole
    found = two_conversations(Tracker(tmp_path / "one.db"), (None, None))
    assert found == apart


def test_migration_from_v4_keeps_every_record(tmp_path) -> None:
    path = tmp_path / "v4.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
    for version in _MIGRATIONS[:4]:
        for stmt in version:
            conn.execute(stmt.format(**_Dialect.ddl))
    conn.execute("INSERT INTO meta VALUES ('schema_version', '4')")
    for i in range(5):
        conn.execute(
            "INSERT INTO requests (record_id, ts, day, model, uncached_input_tokens, "
            "cache_read_tokens, cache_write_tokens, cache_write_5m_tokens, "
            "cache_write_1h_tokens, output_tokens, cache_reported) "
            "VALUES (?, ?, '1970-01-01', 'm', 10, 5, 0, 0, 0, 1, 1)",
            (f"old{i}", float(i)),
        )
    conn.commit()
    conn.close()
    t = Tracker(path)
    assert t.schema_version == SCHEMA_VERSION == 5
    old = t.records()
    assert [r.record_id for r in old] == [f"old{i}" for i in range(5)]
    assert all(r.miss_cause is None and r.usage.cache_read_tokens == 5 for r in old)
    play(t, t0=2_000_000.0)
    assert t.count() == 11


# ---- PostgreSQL ----------------------------------------------------------------------

PG_URL = os.environ.get(
    "PROMPTCACHE_TEST_POSTGRES_URL",
    "postgresql://promptcache:promptcache@127.0.0.1:5432/promptcache_test",
)


def _pg_error() -> str | None:
    try:
        import psycopg
    except ImportError:
        return "psycopg is not installed (pip install 'psycopg[binary]')"
    try:
        psycopg.connect(PG_URL, connect_timeout=3).close()
    except Exception as e:  # noqa: BLE001 - any failure means: no server to test against
        return f"no PostgreSQL server ({str(e).strip().splitlines()[0]}); run .ci/services.sh"
    return None


@pytest.fixture
def pg_url():
    reason = _pg_error()
    if reason:
        pytest.skip(reason)
    import psycopg

    schema = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(PG_URL, autocommit=True) as c:
        c.execute(f"CREATE SCHEMA {schema}")
    sep = "&" if "?" in PG_URL else "?"
    yield f"{PG_URL}{sep}options={quote(f'-csearch_path={schema}')}"
    with psycopg.connect(PG_URL, autocommit=True) as c:
        c.execute(f"DROP SCHEMA {schema} CASCADE")


@pytest.mark.postgres
def test_postgres_attribution_and_migration(pg_url) -> None:
    import psycopg

    # a v4 ledger with committed records
    from promptcache.ledger.schema import PgDialect as _PgDialect

    with psycopg.connect(pg_url, autocommit=True) as c:
        c.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
        for version in _MIGRATIONS[:4]:
            for stmt in version:
                c.execute(stmt.format(**_PgDialect.ddl))
        c.execute("INSERT INTO meta VALUES ('schema_version', '4')")
        c.execute(
            "INSERT INTO requests (record_id, ts, day, model, uncached_input_tokens, "
            "cache_read_tokens, cache_write_tokens, cache_write_5m_tokens, "
            "cache_write_1h_tokens, output_tokens, cache_reported) "
            "VALUES ('old', 1, '1970-01-01', 'm', 10, 0, 0, 0, 0, 1, 1)"
        )
    t = Tracker(pg_url)
    assert t.schema_version == SCHEMA_VERSION
    play(t)
    recs = t.records()
    assert recs[0].record_id == "old" and recs[0].miss_cause is None
    t2 = Tracker(pg_url)  # a second process sees the first one's chains
    t2.record(u(3, 0, 1640), request=body(6, extra_tool=True), api="messages", ts=1_000_500.0)
    last = t2.records()[-1]
    # by shared prefix, the ledger's request without the timestamp (the 4th, at +30 s) is
    # contained whole in this one: its conversation, 470 s ago, past the 5-minute TTL
    assert (last.miss_cause, last.miss_path) == ("ttl_expired", None)
    check_played_pg = [(r.miss_cause, r.miss_path) for r in recs[1:]]
    assert check_played_pg == EXPECTED
