"""The ledger: every request's token counts, prices, cost, latency and prefix hash.

``Tracker(path=None)`` writes to SQLite (WAL) at ``$PROMPTCACHE_LEDGER`` or, by default,
``<user data dir>/promptcache/ledger.db`` (platformdirs). A ``postgresql://`` URL (argument
or environment variable) writes to PostgreSQL through psycopg instead, for many
application servers sharing one ledger.

Guarantees:

- **Durable once acknowledged**: ``record()`` returns after its transaction committed; in
  WAL mode a commit survives a crash (SIGKILL) of the writing process. ``synchronous=
  "FULL"`` also survives power loss at the price of an fsync per commit.
- **Concurrent**: any number of threads (one connection per thread) and processes (SQLite
  file locking, ``BEGIN IMMEDIATE`` with a busy timeout) may write at once. Each record
  carries a unique ``record_id``; re-recording the same id is a no-op, never a duplicate.
- **Private**: token counts, prices, cost, latency and the prefix hash are stored; prompt
  text only when the Tracker is created with ``store_prompts=True`` and a prompt is given.
- **Versioned**: ``meta.schema_version`` plus ordered migrations, applied on open.

Costs are stored as integer pico-dollars (1e-12 USD) so that sums are exact: a price in
USD per million tokens with at most 6 decimals gives an integral pico-dollar amount per
token.
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from functools import lru_cache
from pathlib import Path
from typing import Any

import platformdirs

from promptcache.errors import PromptCacheError
from promptcache.ledger.pricing import Cost, Price, cost_pico, warn_unknown_price
from promptcache.ledger.summary_table import format_table
from promptcache.memo import IdentityMemo
from promptcache.misses.attribution import Attributed, Attributor, api_of_request, common_run
from promptcache.misses.cause import Observation
from promptcache.misses.digest_chain import APIS, DigestChain
from promptcache.providers.usage_record import Usage

__all__ = [
    "Tracker",
    "LedgerError",
    "Record",
    "SummaryRow",
    "default_path",
    "parse_since",
    "SCHEMA_VERSION",
]

log = logging.getLogger("promptcache.ledger.tracker")

ENV_VAR = "PROMPTCACHE_LEDGER"
PICO = Decimal(10) ** 12
GROUPS = ("provider", "model", "prefix_hash", "day", "hour", "api", "miss_cause")


class LedgerError(PromptCacheError):
    """The ledger cannot be opened, migrated or queried (message says what to fix)."""


def default_path() -> str:
    """``$PROMPTCACHE_LEDGER`` if set, else ``<user data dir>/promptcache/ledger.db``."""
    env = os.environ.get(ENV_VAR)
    if env:
        return env

    return str(Path(platformdirs.user_data_dir("promptcache", appauthor=False)) / "ledger.db")


# --- schema ---------------------------------------------------------------------------

# Portable DDL: {pk} / {float} / {bigint} are filled per dialect.
_MIGRATIONS: list[list[str]] = [
    # version 1
    [
        """CREATE TABLE IF NOT EXISTS requests (
            id {pk},
            record_id TEXT NOT NULL UNIQUE,
            ts {float} NOT NULL,
            day TEXT NOT NULL,
            provider TEXT,
            model TEXT,
            api TEXT,
            prefix_hash TEXT,
            uncached_input_tokens {bigint} NOT NULL,
            cache_read_tokens {bigint} NOT NULL,
            cache_write_tokens {bigint} NOT NULL,
            cache_write_5m_tokens {bigint} NOT NULL,
            cache_write_1h_tokens {bigint} NOT NULL,
            output_tokens {bigint} NOT NULL,
            reasoning_tokens {bigint},
            cache_reported INTEGER NOT NULL,
            cost_pusd {bigint},
            baseline_pusd {bigint},
            price_json TEXT,
            latency_ms {float},
            ttft_ms {float},
            stream INTEGER NOT NULL DEFAULT 0,
            flags TEXT,
            metadata TEXT,
            prompt_text TEXT
        )""",
        "CREATE INDEX IF NOT EXISTS requests_ts ON requests (ts)",
        "CREATE INDEX IF NOT EXISTS requests_prefix ON requests (prefix_hash)",
    ],
    # version 2: prices move to their own table (one row per distinct price), so a record
    # is ~200 bytes instead of ~550 and summary() scans less
    [
        "CREATE TABLE IF NOT EXISTS prices (id {pk}, price_json TEXT NOT NULL UNIQUE)",
        "ALTER TABLE requests ADD COLUMN price_id {bigint}",
        "{ins} prices (price_json) SELECT DISTINCT price_json FROM requests "
        "WHERE price_json IS NOT NULL{tail}",
        "UPDATE requests SET price_id = (SELECT p.id FROM prices p "
        "WHERE p.price_json = requests.price_json) WHERE price_json IS NOT NULL",
        "ALTER TABLE requests DROP COLUMN price_json",
    ],
    # version 3: an hourly rollup per (provider, model, prefix_hash, api), maintained in
    # the same transaction as each insert, so summary() reads O(groups) rows instead of
    # scanning every record (NULL keys are stored as '' so that the upsert key matches)
    [
        """CREATE TABLE IF NOT EXISTS rollup (
            hour {bigint} NOT NULL, provider TEXT NOT NULL, model TEXT NOT NULL,
            prefix_hash TEXT NOT NULL, api TEXT NOT NULL,
            requests {bigint} NOT NULL, uncached_input_tokens {bigint} NOT NULL,
            cache_read_tokens {bigint} NOT NULL, cache_write_tokens {bigint} NOT NULL,
            output_tokens {bigint} NOT NULL, reported_read {bigint} NOT NULL,
            reported_prompt {bigint} NOT NULL, unreported {bigint} NOT NULL,
            cost_pusd {bigint} NOT NULL, baseline_pusd {bigint} NOT NULL,
            unpriced {bigint} NOT NULL, misses {bigint} NOT NULL,
            latency_sum {float} NOT NULL, latency_n {bigint} NOT NULL,
            PRIMARY KEY (hour, provider, model, prefix_hash, api))""",
        """{ins} rollup SELECT {hour} AS h, COALESCE(provider, ''), COALESCE(model, ''),
            COALESCE(prefix_hash, ''), COALESCE(api, ''), COUNT(*),
            SUM(uncached_input_tokens), SUM(cache_read_tokens), SUM(cache_write_tokens),
            SUM(output_tokens), SUM(cache_reported * cache_read_tokens),
            SUM(cache_reported * (uncached_input_tokens + cache_read_tokens
                                  + cache_write_tokens)),
            COUNT(*) - SUM(cache_reported), COALESCE(SUM(cost_pusd), 0),
            COALESCE(SUM(baseline_pusd), 0), COUNT(*) - COUNT(cost_pusd),
            SUM(cache_reported * {zero_read}), COALESCE(SUM(latency_ms), 0), COUNT(latency_ms)
            FROM requests GROUP BY 1, 2, 3, 4, 5{tail}""",
    ],
    # version 4: summaries by prefix read the rollup; the per-record prefix index only
    # slowed every insert
    ["DROP INDEX IF EXISTS requests_prefix"],
    # version 5: miss attribution -- each record's cause, where it lies, its lineage and
    # its digest chain (segment digests; the atoms of each distinct segment once, in
    # ``segments``). Columns are added, so every committed record stays as it was.
    [
        "ALTER TABLE requests ADD COLUMN miss_cause TEXT",
        "ALTER TABLE requests ADD COLUMN miss_path TEXT",
        "ALTER TABLE requests ADD COLUMN matched_prefix_tokens {bigint}",
        "ALTER TABLE requests ADD COLUMN miss_offset_chars {bigint}",
        "ALTER TABLE requests ADD COLUMN miss_offset_tokens {bigint}",
        "ALTER TABLE requests ADD COLUMN miss_detail TEXT",
        "ALTER TABLE requests ADD COLUMN miss_excerpt TEXT",
        "ALTER TABLE requests ADD COLUMN lineage TEXT",
        "ALTER TABLE requests ADD COLUMN chain TEXT",
        "CREATE TABLE IF NOT EXISTS segments (digest TEXT PRIMARY KEY, atoms TEXT NOT NULL)",
    ],
]

_ROLLUP_SUMS = (
    "requests",
    "uncached_input_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "output_tokens",
    "reported_read",
    "reported_prompt",
    "unreported",
    "cost_pusd",
    "baseline_pusd",
    "unpriced",
    "misses",
    "latency_sum",
    "latency_n",
)
SCHEMA_VERSION = len(_MIGRATIONS)

_COLUMNS = (
    "record_id",
    "ts",
    "day",
    "provider",
    "model",
    "api",
    "prefix_hash",
    "uncached_input_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "cache_write_5m_tokens",
    "cache_write_1h_tokens",
    "output_tokens",
    "reasoning_tokens",
    "cache_reported",
    "cost_pusd",
    "baseline_pusd",
    "price_id",
    "latency_ms",
    "ttft_ms",
    "stream",
    "flags",
    "metadata",
    "prompt_text",
    "miss_cause",
    "miss_path",
    "matched_prefix_tokens",
    "miss_offset_chars",
    "miss_offset_tokens",
    "miss_detail",
    "miss_excerpt",
    "lineage",
    "chain",
)


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


def _price_json(price: Price | None) -> str | None:
    """The price row stored with a record (cached per Price object)."""
    if price is None:
        return None
    return _PRICE_JSON.get_or_make(price, lambda: json.dumps(price.to_dict(), sort_keys=True))


def _range_where(
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


def _day(ts: float) -> str:
    """UTC date of a Unix timestamp, 'YYYY-MM-DD' (cached per day)."""
    return _day_of(int(ts // 86400))


@lru_cache(maxsize=4096)
def _day_of(day: int) -> str:
    """'YYYY-MM-DD' of the ``day``-th day after 1970-01-01 (UTC)."""
    return datetime.fromtimestamp(day * 86400, timezone.utc).strftime("%Y-%m-%d")


def _pusd(amount: Decimal) -> int:
    """USD -> integer pico-dollars (exact for prices with <= 6 decimals; else rounded)."""
    return int((amount * PICO).to_integral_value())


@dataclass(frozen=True)
class _Atoms:
    """Carries a record's chain JSON and its atoms to the write transaction."""

    text: str
    chain: DigestChain


#: How far back (seconds) and how many recent requests of a model the ledger looks at for
#: a lineage's predecessor when this process has none in memory (24 h covers every
#: documented TTL but OpenAI's 24h retention's edge).
PREDECESSOR_WINDOW_S = 86400.0
PREDECESSOR_CANDIDATES = 64


class _Dialect:
    name = "sqlite"
    param = "?"
    ddl = {
        "pk": "INTEGER PRIMARY KEY AUTOINCREMENT",
        "float": "REAL",
        "bigint": "INTEGER",
        "ins": "INSERT OR IGNORE INTO",
        "tail": "",
        "hour": "CAST(ts / 3600 AS INTEGER)",
        "zero_read": "(cache_read_tokens = 0)",
    }
    insert_ignore = "INSERT OR IGNORE INTO"
    conflict_tail = ""
    hour_expr = "CAST(ts / 3600 AS INTEGER)"
    is_zero_read = "(cache_read_tokens = 0)"
    meta_expr = "json_extract(metadata, '$.{key}')"


class _PgDialect(_Dialect):
    name = "postgresql"
    param = "%s"
    ddl = {
        "pk": "BIGSERIAL PRIMARY KEY",
        "float": "DOUBLE PRECISION",
        "bigint": "BIGINT",
        "ins": "INSERT INTO",
        "tail": " ON CONFLICT DO NOTHING",
        "hour": "CAST(FLOOR(ts / 3600) AS BIGINT)",
        "zero_read": "CAST(cache_read_tokens = 0 AS INTEGER)",
    }
    insert_ignore = "INSERT INTO"
    conflict_tail = " ON CONFLICT (record_id) DO NOTHING"
    hour_expr = "CAST(FLOOR(ts / 3600) AS BIGINT)"
    is_zero_read = "CAST(cache_read_tokens = 0 AS INTEGER)"
    meta_expr = "(metadata::jsonb ->> '{key}')"


class Tracker:
    """A ledger of requests (SQLite in WAL mode, or PostgreSQL for a ``postgresql://``
    URL).

    ``path``: a file path, ``":memory:"`` is refused (use a temp file), or a
    ``postgresql://`` / ``postgres://`` URL; default :func:`default_path`.
    ``store_prompts``: keep prompt text given to :meth:`record` (off by default).
    ``synchronous``: SQLite ``"NORMAL"`` (default; commits survive a process crash) or
    ``"FULL"`` (also survive power loss). ``busy_timeout_s``: how long a writer waits for
    another process's lock before :class:`LedgerError`.

    Thread-safe and process-safe; one connection per thread, reopened after ``fork``.
    Raises :class:`LedgerError` when the database cannot be opened or is from a newer
    promptcache (schema version above :data:`SCHEMA_VERSION`).
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        store_prompts: bool = False,
        synchronous: str = "NORMAL",
        busy_timeout_s: float = 60.0,
    ) -> None:
        target = str(path) if path is not None else default_path()
        if target == ":memory:":
            raise LedgerError(
                "an in-memory ledger cannot be shared across threads or processes; give a file path"
            )
        self.store_prompts = store_prompts
        self.attributor = Attributor()
        self.busy_timeout_s = busy_timeout_s
        if synchronous.upper() not in ("NORMAL", "FULL", "EXTRA"):
            raise LedgerError(f"synchronous={synchronous!r}: use NORMAL or FULL")
        self.synchronous = synchronous.upper()
        self._local = threading.local()
        self._lock = threading.Lock()
        self._all_conns: list[Any] = []
        self._closed = False
        if re.match(r"^postgres(ql)?://", target):
            self.url: str | None = target
            self.path: str | None = None
            self.dialect: type[_Dialect] = _PgDialect
        else:
            self.url = None
            self.path = os.path.abspath(os.path.expanduser(target))
            self.dialect = _Dialect
            try:
                Path(self.path).parent.mkdir(parents=True, exist_ok=True)
            except OSError as e:
                raise LedgerError(
                    f"cannot create the ledger directory for {self.path}: {e.strerror}"
                ) from None
        self._migrate()

    # -- connections ---------------------------------------------------------------

    def __repr__(self) -> str:
        where = self.path if self.url is None else re.sub(r"//[^@/]*@", "//***@", self.url)
        return f"Tracker({where!r})"

    def _connect(self) -> Any:
        if self.url is not None:
            try:
                # lazy import of an optional dependency: psycopg (the postgres extra)
                import psycopg
            except ImportError:
                raise LedgerError(
                    "a postgresql:// ledger needs the postgres extra (psycopg): "
                    "pip install 'promptcache[postgres]'"
                ) from None
            try:
                pg_conn = psycopg.connect(
                    self.url, autocommit=True, connect_timeout=int(max(1, self.busy_timeout_s))
                )
            except psycopg.Error as e:
                raise LedgerError(
                    f"cannot connect to the PostgreSQL ledger: {str(e).strip().splitlines()[0]}"
                ) from None
            return pg_conn
        assert self.path is not None  # a Tracker has a URL or a path (see __init__)
        try:
            conn = sqlite3.connect(
                self.path,
                timeout=self.busy_timeout_s,
                isolation_level=None,
                check_same_thread=False,
            )
            conn.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout_s * 1000)}")
            (mode,) = conn.execute("PRAGMA journal_mode = WAL").fetchone() or ("",)
            if str(mode).lower() != "wal":
                raise LedgerError(
                    f"{self.path}: could not switch to WAL mode (got {mode}); "
                    "is it on a network file system?"
                )
            conn.execute(f"PRAGMA synchronous = {self.synchronous}")
        except sqlite3.DatabaseError as e:
            raise LedgerError(
                f"cannot open the ledger {self.path}: {e} (is it a promptcache ledger?)"
            ) from None
        return conn

    def _conn(self) -> Any:
        if self._closed:
            raise LedgerError("this Tracker is closed")
        conn = getattr(self._local, "conn", None)
        if conn is None or getattr(self._local, "pid", None) != os.getpid():
            conn = self._connect()
            self._local.conn, self._local.pid = conn, os.getpid()
            with self._lock:
                self._all_conns.append(conn)
        return conn

    @contextmanager
    def _write(self) -> Iterator[Any]:
        """A write transaction (BEGIN IMMEDIATE on SQLite: takes the write lock up front so
        concurrent writers wait instead of failing on a lock upgrade)."""
        conn = self._conn()
        if self.url is None:
            cur = conn.cursor()
            try:
                cur.execute("BEGIN IMMEDIATE")
            except sqlite3.OperationalError as e:
                raise LedgerError(f"ledger {self.path} is locked or unwritable: {e}") from None
            try:
                yield cur
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            else:
                conn.execute("COMMIT")
        else:
            with conn.transaction():
                with conn.cursor() as cur:
                    yield cur

    def close(self) -> None:
        """Close every connection this Tracker opened (in any thread)."""
        with self._lock:
            conns, self._all_conns = self._all_conns, []
        for c in conns:
            try:
                c.close()
            except Exception:  # pragma: no cover - closing is best effort
                pass
        self._closed = True

    def __enter__(self) -> Tracker:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _migrate(self) -> None:
        d = self.dialect
        try:
            with self._write() as cur:
                cur.execute(
                    "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)"
                )
                cur.execute(f"SELECT value FROM meta WHERE key = {d.param}", ("schema_version",))
                row = cur.fetchone()
                version = int(row[0]) if row else 0
                if version > SCHEMA_VERSION:
                    raise LedgerError(
                        f"ledger {self} has schema version {version}, newer than this "
                        f"promptcache understands ({SCHEMA_VERSION}); upgrade promptcache"
                    )
                for v in range(version, SCHEMA_VERSION):
                    for stmt in _MIGRATIONS[v]:
                        cur.execute(stmt.format(**d.ddl))
                if version != SCHEMA_VERSION:
                    if row:
                        cur.execute(
                            f"UPDATE meta SET value = {d.param} WHERE key = {d.param}",
                            (str(SCHEMA_VERSION), "schema_version"),
                        )
                    else:
                        cur.execute(
                            f"INSERT INTO meta (key, value) VALUES ({d.param}, {d.param})",
                            ("schema_version", str(SCHEMA_VERSION)),
                        )
        except sqlite3.DatabaseError as e:
            raise LedgerError(
                f"{self.path} is not a promptcache ledger (or is damaged): {e}"
            ) from None

    @property
    def schema_version(self) -> int:
        """The schema version stored in the database."""
        cur = self._conn().cursor()
        cur.execute(f"SELECT value FROM meta WHERE key = {self.dialect.param}", ("schema_version",))
        return int(cur.fetchone()[0])

    # -- writing -------------------------------------------------------------------

    def _row(
        self,
        usage: Usage,
        *,
        model: str | None = None,
        provider: str | None = None,
        price: Price | None = None,
        cost: Cost | None = None,
        api: str | None = None,
        prefix_hash: str | None = None,
        latency_ms: float | None = None,
        ttft_ms: float | None = None,
        stream: bool = False,
        metadata: Mapping[str, Any] | None = None,
        prompt: str | None = None,
        ts: float | None = None,
        record_id: str | None = None,
        request: Mapping[str, Any] | None = None,
        lineage: str | None = None,
        rules: Any = None,
        attributed: Attributed | None = None,
    ) -> tuple[Any, ...]:
        if not isinstance(usage, Usage):
            raise TypeError(
                "Tracker.record needs a promptcache.Usage; convert a response "
                "with promptcache.normalize_usage(provider, response) first"
            )
        model = model or usage.model
        provider = provider or usage.provider
        cost_p = base_p = price_json = None
        if cost is not None:
            cost_p, base_p = _pusd(cost.total), _pusd(cost.baseline)
            price_json = _price_json(cost.price)
        else:
            try:
                cost_p, base_p, used = cost_pico(usage, model=model, price=price)
                price_json = _price_json(used)
            except PromptCacheError as e:  # unknown price: stored unpriced, not an error
                log.debug("ledger: request recorded without cost: %s", e)
                warn_unknown_price(model, e)
        ts = time.time() if ts is None else float(ts)
        day = _day(ts)
        if attributed is None and request is not None:
            attributed = self.attribute(
                request, usage, ts=ts, api=api, model=model, lineage=lineage, rules=rules
            )
        miss: tuple[Any, ...] = (None,) * 9
        if attributed is not None:
            a = attributed.attribution
            excerpt = None
            if self.store_prompts and a.before is not None and a.after is not None:
                excerpt = json.dumps([a.before, a.after], ensure_ascii=False)
            chain_json = attributed.chain.to_json()
            retention = request.get("prompt_cache_retention") if request is not None else None
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
                _Atoms(json.dumps(chain_json, separators=(",", ":")), attributed.chain),
            )
        return (
            record_id or os.urandom(16).hex(),
            ts,
            day,
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
            price_json,
            latency_ms,
            ttft_ms,
            int(bool(stream)),
            json.dumps(list(usage.flags)) if usage.flags else None,
            json.dumps(dict(metadata), sort_keys=True, default=str) if metadata else None,
            prompt if (self.store_prompts and prompt is not None) else None,
            *miss,
        )

    def _insert_sql(self) -> str:
        d = self.dialect
        cols = ", ".join(_COLUMNS)
        marks = ", ".join([d.param] * len(_COLUMNS))
        return f"{d.insert_ignore} requests ({cols}) VALUES ({marks}){d.conflict_tail}"

    _PRICE_COL = _COLUMNS.index("price_id")

    def _price_ids(self, cur: Any, rows: list[tuple]) -> list[tuple]:
        """Replace each row's price JSON by the id of its row in ``prices`` (inserted when
        new), inside the caller's write transaction."""
        cache: dict[str, int] = self.__dict__.setdefault("_price_id_cache", {})
        d, col = self.dialect, self._PRICE_COL
        out = []
        for row in rows:
            text = row[col]
            if text is not None:
                pid = cache.get(text)
                if pid is None:
                    cur.execute(
                        f"{d.ddl['ins']} prices (price_json) VALUES ({d.param}){d.ddl['tail']}",
                        (text,),
                    )
                    cur.execute(f"SELECT id FROM prices WHERE price_json = {d.param}", (text,))
                    pid = int(cur.fetchone()[0])
                    cache[text] = pid
                row = row[:col] + (pid,) + row[col + 1 :]
            out.append(row)
        return out

    def record(self, usage: Usage, **fields: Any) -> str:
        """Store one request and return its ``record_id`` once committed (durable).

        ``usage``: a normalized :class:`~promptcache.Usage`. Keyword fields (all optional):
        ``model``, ``provider`` (default: from the usage), ``price`` (a ``Price``; else the
        model's bundled row; an unknown price stores the request without cost), ``cost``
        (a precomputed ``Cost``), ``api`` (e.g. ``"chat.completions"``), ``prefix_hash``,
        ``latency_ms`` and ``ttft_ms`` (milliseconds), ``stream``, ``metadata`` (a JSON-able
        mapping), ``prompt`` (stored only with ``store_prompts=True``), ``ts`` (Unix
        seconds, default now), ``record_id`` (default a new UUID; an id already stored is
        ignored, so retries never duplicate).

        Miss attribution (:mod:`promptcache.misses.cause`): ``request`` (the request body as
        sent, a JSON object; reduced to its digest chain, never stored as text unless
        ``store_prompts``), ``lineage`` (the key of the conversation it belongs to;
        default ``"<provider>:<model>"``), ``rules`` (a
        :class:`~promptcache.limits.CacheLimits` to apply instead of the model's row).
        """
        row = self._row(usage, **fields)
        try:
            with self._write() as cur:
                self._insert(cur, [row])
        except BaseException:
            self.__dict__.pop("_known_segments", None)
            raise
        return str(row[0])

    def record_many(self, items: Iterable[Usage | tuple[Usage, Mapping[str, Any]]]) -> list[str]:
        """Store many requests in ONE transaction (much faster than ``record`` in a loop).
        Each item is a ``Usage`` or ``(usage, fields)`` with ``record``'s keywords.
        All or nothing; returns the record ids."""
        rows = []
        for item in items:
            if isinstance(item, Usage):
                rows.append(self._row(item))
            else:
                usage, kw = item
                rows.append(self._row(usage, **kw))
        if rows:
            try:
                with self._write() as cur:
                    self._insert(cur, rows)
            except BaseException:
                self.__dict__.pop("_known_segments", None)
                raise
        return [r[0] for r in rows]

    # -- miss attribution ------------------------------------------------------------

    def attribute(
        self,
        request: Mapping[str, Any],
        usage: Usage,
        *,
        ts: float | None = None,
        api: str | None = None,
        model: str | None = None,
        lineage: str | None = None,
        rules: Any = None,
    ) -> Attributed:
        """The miss attribution :meth:`record` stores for ``request`` (see there); this
        request becomes the lineage's latest in this process."""
        model = model or usage.model
        chain_api = api if api in APIS else api_of_request(request)
        key = lineage or f"{usage.provider or ''}:{model or ''}"
        return self.attributor.attribute(
            request,
            chain_api,
            usage,
            time.time() if ts is None else float(ts),
            lineage=key,
            rules=rules,
            fallback=lambda chain: self.predecessor(chain, model=model, before=ts, lineage=key),
        )

    def predecessor(
        self,
        chain: DigestChain,
        *,
        model: str | None,
        before: float | None = None,
        lineage: str | None = None,
    ) -> tuple[Observation, bool] | None:
        """The ledger's predecessor of ``chain`` among the latest
        :data:`PREDECESSOR_CANDIDATES` requests for ``model`` within
        :data:`PREDECESSOR_WINDOW_S`: the latest of the same ``lineage`` if there is one
        (returned with True), else the one whose chain shares the longest common run of
        segment digests (with False); None when none shares a first segment."""
        if not model or not chain.segments:
            return None
        d = self.dialect
        now = time.time() if before is None else float(before)
        cur = self._conn().cursor()
        cur.execute(
            "SELECT ts, chain, uncached_input_tokens, cache_read_tokens, cache_write_tokens, "
            "cache_write_5m_tokens, cache_write_1h_tokens, output_tokens, cache_reported, "
            f"provider, lineage FROM requests WHERE ts >= {d.param} AND ts <= {d.param} AND "
            f"model = {d.param} AND chain IS NOT NULL ORDER BY ts DESC LIMIT "
            f"{int(PREDECESSOR_CANDIDATES)}",
            (now - PREDECESSOR_WINDOW_S, now, model),
        )
        mine = chain.digests()
        best: tuple[int, float, Any] | None = None
        same = False
        for row in cur.fetchall():  # newest first
            try:
                data = json.loads(row[1])
                digests = [seg[1] for seg in data["segments"]]
            except (ValueError, KeyError, TypeError, IndexError):
                continue
            run = common_run(mine, digests)
            if lineage is not None and row[10] == lineage:
                best, same = (run, float(row[0]), (data, row)), True
                break
            if run and (best is None or run > best[0]):
                best = (run, float(row[0]), (data, row))
        if best is None:
            return None
        run, ts, (data, row) = best
        segs = data["segments"]
        want = [segs[run][1]] if run < len(segs) else []
        atoms: dict[str, list[Any]] = {}
        if want:
            cur.execute(f"SELECT digest, atoms FROM segments WHERE digest = {d.param}", want)
            for digest, text in cur.fetchall():
                atoms[digest] = json.loads(text)
        prev_chain = DigestChain.from_json(data, atoms)
        w, w5, w1 = int(row[4]), int(row[5]), int(row[6])
        ttl = {"5m": w5, "1h": w1}
        if w - w5 - w1:
            ttl["other"] = w - w5 - w1
        usage = Usage(
            uncached_input_tokens=int(row[2]),
            cache_read_tokens=int(row[3]),
            cache_write_tokens=w,
            output_tokens=int(row[7]),
            cache_write_by_ttl=ttl,
            cache_reported=bool(row[8]),
            provider=row[9],
            model=model,
        )
        retention = data.get("retention")
        obs = Observation(prev_chain, usage, ts, retention if isinstance(retention, str) else None)
        return obs, same

    def miss_groups(self, since: Any = None, until: Any = None) -> list[dict[str, Any]]:
        """Attributed requests grouped by (cause, path, model): ``requests``,
        ``prompt_tokens``, ``cache_read_tokens``, ``missed_tokens`` (prompt tokens not read
        from the cache), ``matched_tokens`` (sum of ``matched_prefix_tokens``) and the latest ``last_ts``;
        most missed tokens first. Requests without a cause are left
        out. Raises ``ValueError`` for a bad ``since``/``until``."""
        d = self.dialect
        where, params = _range_where("ts", parse_since(since), parse_since(until), d.param)
        where = (where + " AND " if where else "WHERE ") + "miss_cause IS NOT NULL"
        cur = self._conn().cursor()
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

    def chain(self, record_id: str) -> DigestChain | None:
        """The stored digest chain of a record (with the atoms of its segments), or None."""
        d = self.dialect
        cur = self._conn().cursor()
        cur.execute(f"SELECT chain FROM requests WHERE record_id = {d.param}", (record_id,))
        row = cur.fetchone()
        if row is None or row[0] is None:
            return None
        data = json.loads(row[0])
        digests = sorted({seg[1] for seg in data["segments"]})
        atoms: dict[str, Any] = {}
        for i in range(0, len(digests), 500):
            part = digests[i : i + 500]
            cur.execute(
                f"SELECT digest, atoms FROM segments WHERE digest IN "
                f"({', '.join([d.param] * len(part))})",
                part,
            )
            for digest, text in cur.fetchall():
                atoms[digest] = json.loads(text)
        return DigestChain.from_json(data, atoms)

    _CHAIN_COL = _COLUMNS.index("chain")

    def _segments(self, cur: Any, rows: list[tuple]) -> list[tuple]:
        """Store the atoms of segments not stored yet and put each row's chain JSON in
        place of its :class:`_Atoms` carrier (inside the caller's write transaction)."""
        known: set[str] = self.__dict__.setdefault("_known_segments", set())
        d, col = self.dialect, self._CHAIN_COL
        out, new = [], {}
        for row in rows:
            carrier = row[col]
            if isinstance(carrier, _Atoms):
                for digest, atoms in carrier.chain.atoms.items():
                    if digest not in known and digest not in new:
                        new[digest] = json.dumps(
                            [a.to_list() for a in atoms], separators=(",", ":")
                        )
                row = row[:col] + (carrier.text,) + row[col + 1 :]
            out.append(row)
        if new:
            cur.executemany(
                f"{d.ddl['ins']} segments (digest, atoms) VALUES ({d.param}, {d.param})"
                f"{d.ddl['tail']}",
                sorted(new.items()),
            )
            if len(known) > 200_000:
                known.clear()
            known.update(new)
        return out

    def _insert(self, cur: Any, rows: list[tuple]) -> None:
        """Insert rows whose record_id is new (inside the caller's write transaction) and
        add exactly those to the hourly rollup."""
        rows = self._price_ids(cur, rows)
        rows = self._segments(cur, rows)
        seen: set[str] = set()
        uniq = []
        for r in rows:
            if r[0] not in seen:
                seen.add(r[0])
                uniq.append(r)
        if self.url is None:
            # BEGIN IMMEDIATE holds the write lock: what exists now cannot change under us
            existing: set[str] = set()
            ids = [r[0] for r in uniq]
            for i in range(0, len(ids), 500):
                chunk = ids[i : i + 500]
                cur.execute(
                    "SELECT record_id FROM requests WHERE record_id IN "
                    f"({', '.join('?' * len(chunk))})",
                    chunk,
                )
                existing.update(x[0] for x in cur.fetchall())
            new = [r for r in uniq if r[0] not in existing]
            if new:
                cur.executemany(self._insert_sql(), new)
        else:
            cur.executemany(self._insert_sql() + " RETURNING record_id", uniq, returning=True)
            inserted: set[str] = set()
            while True:
                got = cur.fetchone()
                if got is not None:
                    inserted.add(got[0])
                if not cur.nextset():
                    break
            new = [r for r in uniq if r[0] in inserted]
        if new:
            self._add_to_rollup(cur, new)

    _IDX = {c: i for i, c in enumerate(_COLUMNS)}

    def _add_to_rollup(self, cur: Any, rows: list[tuple]) -> None:
        ix = self._IDX
        agg: dict[tuple, list] = {}
        for r in rows:
            key = (
                int(r[ix["ts"]] // 3600),
                r[ix["provider"]] or "",
                r[ix["model"]] or "",
                r[ix["prefix_hash"]] or "",
                r[ix["api"]] or "",
            )
            a = agg.get(key)
            if a is None:
                a = agg[key] = [0] * 12 + [0.0, 0]
            un, rd, wr, out = (
                r[ix["uncached_input_tokens"]],
                r[ix["cache_read_tokens"]],
                r[ix["cache_write_tokens"]],
                r[ix["output_tokens"]],
            )
            rep = r[ix["cache_reported"]]
            cost_p, base_p, lat = r[ix["cost_pusd"]], r[ix["baseline_pusd"]], r[ix["latency_ms"]]
            a[0] += 1
            a[1] += un
            a[2] += rd
            a[3] += wr
            a[4] += out
            a[5] += rep * rd
            a[6] += rep * (un + rd + wr)
            a[7] += 1 - rep
            if cost_p is None:
                a[10] += 1
            else:
                a[8] += cost_p
                a[9] += base_p
            a[11] += rep * (rd == 0)
            if lat is not None:
                a[12] += float(lat)
                a[13] += 1
        d = self.dialect
        cols = ("hour", "provider", "model", "prefix_hash", "api") + _ROLLUP_SUMS
        upd = ", ".join(f"{c} = rollup.{c} + excluded.{c}" for c in _ROLLUP_SUMS)
        sql = (
            f"INSERT INTO rollup ({', '.join(cols)}) VALUES "
            f"({', '.join([d.param] * len(cols))}) ON CONFLICT (hour, provider, model, "
            f"prefix_hash, api) DO UPDATE SET {upd}"
        )
        # sorted keys: concurrent PostgreSQL writers lock rollup rows in the same order
        cur.executemany(sql, [k + tuple(v[:12]) + (v[12], v[13]) for k, v in sorted(agg.items())])

    # -- reading -------------------------------------------------------------------

    def count(self) -> int:
        """Number of stored requests."""
        cur = self._conn().cursor()
        cur.execute("SELECT COUNT(*) FROM requests")
        return int(cur.fetchone()[0])

    def summary(self, by: str | None = "provider", since: Any = None, until: Any = None) -> Summary:
        """Aggregate the ledger. ``by``: ``"provider"``, ``"model"``, ``"prefix_hash"``,
        ``"day"`` (UTC date), ``"hour"`` (UTC, ISO text), ``"api"``, ``"miss_cause"`` (the
        attributed cause, :data:`promptcache.misses.cause.CAUSES`; scans the records),
        ``"metadata.KEY"`` (a
        key of the metadata given to ``record``/``wrap``; scans the records), or None for
        one overall row. ``since``/``until``: see :func:`parse_since`. Rows are ordered by
        key (time groups) or by cost, largest first. Raises ``ValueError`` for an
        unknown ``by``.

        Whole hours are read from the hourly rollup (maintained with every insert);
        only the partial hours at the edges of ``since``/``until`` scan records (by the
        ``ts`` index), so the cost does not grow with the number of records.

        Returns a :class:`Summary`: the list of rows, printing as the report's table."""
        rows = self._summary(by, since, until)

        def total() -> SummaryRow | None:
            overall = rows if by is None else self._summary(None, since, until)
            return overall[0] if overall else None

        return Summary(rows, by, total)

    def _summary(self, by: str | None, since: Any, until: Any) -> list[SummaryRow]:
        meta_key = by[len("metadata.") :] if by and by.startswith("metadata.") else None
        if meta_key is not None and not re.fullmatch(r"[A-Za-z0-9_]{1,64}", meta_key):
            raise ValueError(f"by={by!r}: a metadata key is letters, digits and _")
        if by is not None and by not in GROUPS and meta_key is None:
            raise ValueError(f"by={by!r}: use one of {', '.join(GROUPS)}, metadata.KEY or None")
        lo, hi = parse_since(since), parse_since(until)
        h_lo = None if lo is None else math.ceil(lo / 3600)
        h_hi = None if hi is None else math.floor(hi / 3600)
        raw: list[tuple[float | None, float | None]] = []
        use_rollup = True
        if meta_key is not None or by == "miss_cause":  # not in the rollup: scan records
            use_rollup, raw = False, [(lo, hi)]
        elif h_lo is not None and h_hi is not None and h_lo >= h_hi:
            use_rollup, raw = False, [(lo, hi)]
        else:
            if lo is not None and h_lo is not None and lo < h_lo * 3600:
                raw.append((lo, h_lo * 3600))
            if hi is not None and h_hi is not None and h_hi * 3600 < hi:
                raw.append((h_hi * 3600, hi))
        acc: dict[Any, list] = {}

        def add(key: Any, vals: Sequence[Any]) -> None:
            a = acc.setdefault(key, [0] * 12 + [0.0, 0])
            for i, v in enumerate(vals):
                if v is not None:
                    a[i] += float(v) if i == 12 else int(v)

        cur = self._conn().cursor()
        d = self.dialect
        if use_rollup:
            key = {None: "NULL", "day": "hour / 24", "hour": "hour"}.get(by, by)
            where, params = _range_where("hour", h_lo, h_hi, d.param)
            sums = ", ".join(f"SUM({c})" for c in _ROLLUP_SUMS)
            cur.execute(f"SELECT {key} AS k, {sums} FROM rollup {where} GROUP BY k", params)
            for r in cur.fetchall():
                k = r[0]
                if by == "day":
                    k = datetime.fromtimestamp(int(k) * 86400, timezone.utc).strftime("%Y-%m-%d")
                elif by == "hour":
                    k = int(k)
                elif by is not None and k == "":
                    k = None
                add(k, r[1:])
        for r_lo, r_hi in raw:
            key = {"hour": d.hour_expr, None: "NULL"}.get(by, by)
            if meta_key is not None:
                key = d.meta_expr.format(key=meta_key)
            where, params = _range_where("ts", r_lo, r_hi, d.param)
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
            for r in cur.fetchall():
                k = r[0]
                add(int(k) if by == "hour" and k is not None else k, r[1:])
        out = []
        for k, a in acc.items():
            if a[0] == 0:
                continue
            if by == "hour" and k is not None:
                k = datetime.fromtimestamp(int(k) * 3600, timezone.utc).strftime("%Y-%m-%dT%H:00Z")
            uncached, read, write, output = a[1], a[2], a[3], a[4]
            cost_p, base_p = Decimal(a[8]) / PICO, Decimal(a[9]) / PICO
            out.append(
                SummaryRow(
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
            )
        if by in ("day", "hour"):
            out.sort(key=lambda s: s.key or "")
        else:
            out.sort(key=lambda s: (-s.cost, -s.requests, s.key or ""))
        return out

    def records(self, since: Any = None, limit: int | None = None) -> list[Record]:
        """Stored requests, oldest first (``limit``: the most recent N)."""
        d = self.dialect
        cols = ", ".join(_COLUMNS)
        sql = f"SELECT {cols} FROM requests"
        params: list[Any] = []
        lo = parse_since(since)
        if lo is not None:
            sql += f" WHERE ts >= {d.param}"
            params.append(lo)
        sql += " ORDER BY ts DESC, id DESC"
        if limit is not None:
            sql += f" LIMIT {int(limit)}"
        cur = self._conn().cursor()
        cur.execute(sql, params)
        out = []
        for r in reversed(cur.fetchall()):
            row = dict(zip(_COLUMNS, r))
            w5, w1, w = (
                row["cache_write_5m_tokens"],
                row["cache_write_1h_tokens"],
                row["cache_write_tokens"],
            )
            ttl = {"5m": w5, "1h": w1}
            if w - w5 - w1:
                ttl["other"] = w - w5 - w1
            usage = Usage(
                uncached_input_tokens=row["uncached_input_tokens"],
                cache_read_tokens=row["cache_read_tokens"],
                cache_write_tokens=w,
                output_tokens=row["output_tokens"],
                cache_write_by_ttl=ttl,
                cache_reported=bool(row["cache_reported"]),
                reasoning_tokens=row["reasoning_tokens"],
                provider=row["provider"],
                model=row["model"],
                flags=tuple(json.loads(row["flags"])) if row["flags"] else (),
            )
            out.append(
                Record(
                    record_id=row["record_id"],
                    ts=row["ts"],
                    provider=row["provider"],
                    model=row["model"],
                    api=row["api"],
                    prefix_hash=row["prefix_hash"],
                    usage=usage,
                    cost=None if row["cost_pusd"] is None else Decimal(row["cost_pusd"]) / PICO,
                    baseline=(
                        None
                        if row["baseline_pusd"] is None
                        else Decimal(row["baseline_pusd"]) / PICO
                    ),
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
                    miss_excerpt=(
                        tuple(json.loads(row["miss_excerpt"])) if row["miss_excerpt"] else None
                    ),
                    lineage=row["lineage"],
                )
            )
        return out

    # -- report helpers (token counts only: prices play no part) ------------------

    @property
    def location(self) -> str:
        """Where the ledger lives: its file path, or its URL with any password hidden."""
        if self.url is None:
            return str(self.path)
        return re.sub(r"//[^@/]*@", "//***@", self.url)

    def time_span(self, since: Any = None) -> tuple[float, float] | None:
        """``(first, last)`` request time (Unix seconds) since ``since``; None if none."""
        where, params = _range_where("ts", parse_since(since), None, self.dialect.param)
        cur = self._conn().cursor()
        cur.execute(f"SELECT MIN(ts), MAX(ts) FROM requests {where}", params)
        lo, hi = cur.fetchone()
        return None if lo is None else (float(lo), float(hi))

    def hit_series(self, bucket_s: int, since: Any = None) -> list[tuple[float, int, int]]:
        """Token-weighted hit-rate inputs per ``bucket_s``-second bucket (UTC-aligned):
        ``[(bucket_start_ts, cache_read_tokens, prompt_tokens), ...]`` over the requests
        whose provider reported caching, oldest first. Scans the records in the period."""
        if bucket_s < 1:
            raise ValueError("bucket_s must be >= 1 second")
        d = self.dialect
        where, params = _range_where("ts", parse_since(since), None, d.param)
        where = (where + " AND" if where else "WHERE") + " cache_reported = 1"
        bucket = (
            f"CAST(FLOOR(ts / {int(bucket_s)}) AS BIGINT)"
            if d is _PgDialect
            else (f"CAST(ts / {int(bucket_s)} AS INTEGER)")
        )
        cur = self._conn().cursor()
        cur.execute(
            f"""SELECT {bucket} AS b, SUM(cache_read_tokens),
            SUM(uncached_input_tokens + cache_read_tokens + cache_write_tokens)
            FROM requests {where} GROUP BY b ORDER BY b""",
            params,
        )
        return [(float(b) * bucket_s, int(r), int(p)) for b, r, p in cur.fetchall()]

    def hit_counts(
        self, by: str | None, min_share: float, since: Any = None
    ) -> dict[str | None, tuple[int, int]]:
        """Per group of ``by`` (``provider``, ``model``, ``prefix_hash``, ``api`` or None):
        ``(hits, reported)`` where ``reported`` counts the requests whose provider reported
        caching and ``hits`` those of them that read at least ``min_share`` (0..1] of their
        prompt tokens from the cache. Scans the records in the period."""
        if by is not None and by not in ("provider", "model", "prefix_hash", "api"):
            raise ValueError(f"by={by!r}: use provider, model, prefix_hash, api or None")
        if not 0 < min_share <= 1:
            raise ValueError("min_share must be in (0, 1]")
        d = self.dialect
        where, params = _range_where("ts", parse_since(since), None, d.param)
        where = (where + " AND" if where else "WHERE") + " cache_reported = 1"
        key = "NULL" if by is None else by
        cur = self._conn().cursor()
        cur.execute(
            f"""SELECT {key} AS k, COUNT(*), SUM(CASE WHEN cache_read_tokens >= {d.param} *
            (uncached_input_tokens + cache_read_tokens + cache_write_tokens)
            AND cache_read_tokens > 0 THEN 1 ELSE 0 END)
            FROM requests {where} GROUP BY k""",
            [float(min_share), *params],
        )
        return {k: (int(h), int(n)) for k, n, h in cur.fetchall()}
