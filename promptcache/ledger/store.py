"""The ledger's storage: SQLite (WAL) or PostgreSQL connections, schema migrations, and the
write transaction that inserts rows with their prices, digest-chain segments and rollup.

Guarantees (what :class:`promptcache.Tracker` promises rests on these):

- **Durable once acknowledged**: :meth:`Store.insert` returns after its transaction committed;
  in WAL mode a commit survives a crash (SIGKILL) of the writing process. ``synchronous=
  "FULL"`` also survives power loss at the price of an fsync per commit.
- **Concurrent**: any number of threads (one connection per thread, reopened after ``fork``)
  and processes (SQLite file locking, ``BEGIN IMMEDIATE`` with a busy timeout) may write at
  once. Re-inserting a ``record_id`` already stored is a no-op, never a duplicate, and is not
  added to the rollup twice.
- **Versioned**: ``meta.schema_version`` plus the ordered migrations of
  :mod:`promptcache.ledger.schema`, applied on open.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import platformdirs

from promptcache.errors import PromptCacheError
from promptcache.ledger.records import Atoms
from promptcache.ledger.schema import (
    COLUMNS,
    MIGRATIONS,
    ROLLUP_SUMS,
    SCHEMA_VERSION,
    Dialect,
    PgDialect,
)

ENV_VAR = "PROMPTCACHE_LEDGER"

_PRICE_COL = COLUMNS.index("price_id")
_CHAIN_COL = COLUMNS.index("chain")
_IDX = {c: i for i, c in enumerate(COLUMNS)}


class LedgerError(PromptCacheError):
    """The ledger cannot be opened, migrated or queried (message says what to fix)."""


def default_path() -> str:
    """``$PROMPTCACHE_LEDGER`` if set, else ``<user data dir>/promptcache/ledger.db``."""
    env = os.environ.get(ENV_VAR)
    if env:
        return env

    return str(Path(platformdirs.user_data_dir("promptcache", appauthor=False)) / "ledger.db")


def hide_password(url: str) -> str:
    """``url`` with any ``user:password@`` replaced by ``***@``."""
    return re.sub(r"//[^@/]*@", "//***@", url)


class Store:
    """Connections to one ledger database and its write transaction.

    ``target``: a file path or a ``postgresql://`` / ``postgres://`` URL (``":memory:"`` is
    refused: it cannot be shared across threads). ``synchronous``: SQLite ``NORMAL``, ``FULL``
    or ``EXTRA``. ``busy_timeout_s``: how long a writer waits for another's lock. Raises
    :class:`LedgerError` when the database cannot be opened or is from a newer promptcache.
    """

    def __init__(self, target: str, *, synchronous: str = "NORMAL", busy_timeout_s: float = 60.0):
        if target == ":memory:":
            raise LedgerError(
                "an in-memory ledger cannot be shared across threads or processes; give a file path"
            )
        if synchronous.upper() not in ("NORMAL", "FULL", "EXTRA"):
            raise LedgerError(f"synchronous={synchronous!r}: use NORMAL or FULL")
        self.synchronous = synchronous.upper()
        self.busy_timeout_s = busy_timeout_s
        self._local = threading.local()
        self._lock = threading.Lock()
        self._all_conns: list[Any] = []
        self._closed = False
        self._price_ids: dict[str, int] = {}
        self._known_segments: set[str] = set()
        if re.match(r"^postgres(ql)?://", target):
            self.url: str | None = target
            self.path: str | None = None
            self.dialect: type[Dialect] = PgDialect
        else:
            self.url = None
            self.path = os.path.abspath(os.path.expanduser(target))
            self.dialect = Dialect
            try:
                Path(self.path).parent.mkdir(parents=True, exist_ok=True)
            except OSError as e:
                raise LedgerError(
                    f"cannot create the ledger directory for {self.path}: {e.strerror}"
                ) from None
        self._migrate()

    @property
    def location(self) -> str:
        """Where the ledger lives: its file path, or its URL with any password hidden."""
        return str(self.path) if self.url is None else hide_password(self.url)

    # -- connections ---------------------------------------------------------------

    def _connect(self) -> Any:
        if self.url is not None:
            return self._connect_pg(self.url)
        assert self.path is not None  # a Store has a URL or a path (see __init__)
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

    def _connect_pg(self, url: str) -> Any:
        try:
            # lazy import of an optional dependency: psycopg (the postgres extra)
            import psycopg
        except ImportError:
            raise LedgerError(
                "a postgresql:// ledger needs the postgres extra (psycopg): "
                "pip install 'promptcache[postgres]'"
            ) from None
        try:
            return psycopg.connect(
                url, autocommit=True, connect_timeout=int(max(1, self.busy_timeout_s))
            )
        except psycopg.Error as e:
            raise LedgerError(
                f"cannot connect to the PostgreSQL ledger: {str(e).strip().splitlines()[0]}"
            ) from None

    def conn(self) -> Any:
        """This thread's connection (opened on first use, reopened after ``fork``)."""
        if self._closed:
            raise LedgerError("this Tracker is closed")
        conn = getattr(self._local, "conn", None)
        if conn is None or getattr(self._local, "pid", None) != os.getpid():
            conn = self._connect()
            self._local.conn, self._local.pid = conn, os.getpid()
            with self._lock:
                self._all_conns.append(conn)
        return conn

    def cursor(self) -> Any:
        """A cursor on this thread's connection, for reading."""
        return self.conn().cursor()

    @contextmanager
    def write(self) -> Iterator[Any]:
        """A write transaction (BEGIN IMMEDIATE on SQLite: takes the write lock up front so
        concurrent writers wait instead of failing on a lock upgrade)."""
        conn = self.conn()
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
        """Close every connection this Store opened (in any thread)."""
        with self._lock:
            conns, self._all_conns = self._all_conns, []
        for c in conns:
            try:
                c.close()
            except Exception:  # pragma: no cover - closing is best effort
                pass
        self._closed = True

    # -- schema --------------------------------------------------------------------

    def _migrate(self) -> None:
        d = self.dialect
        try:
            with self.write() as cur:
                cur.execute(
                    "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)"
                )
                cur.execute(f"SELECT value FROM meta WHERE key = {d.param}", ("schema_version",))
                row = cur.fetchone()
                version = int(row[0]) if row else 0
                if version > SCHEMA_VERSION:
                    raise LedgerError(
                        f"ledger {self.location} has schema version {version}, newer than this "
                        f"promptcache understands ({SCHEMA_VERSION}); upgrade promptcache"
                    )
                for v in range(version, SCHEMA_VERSION):
                    for stmt in MIGRATIONS[v]:
                        cur.execute(stmt.format(**d.ddl))
                if version != SCHEMA_VERSION:
                    self._set_version(cur, exists=row is not None)
        except sqlite3.DatabaseError as e:
            raise LedgerError(
                f"{self.path} is not a promptcache ledger (or is damaged): {e}"
            ) from None

    def _set_version(self, cur: Any, *, exists: bool) -> None:
        p = self.dialect.param
        if exists:
            cur.execute(
                f"UPDATE meta SET value = {p} WHERE key = {p}",
                (str(SCHEMA_VERSION), "schema_version"),
            )
        else:
            cur.execute(
                f"INSERT INTO meta (key, value) VALUES ({p}, {p})",
                ("schema_version", str(SCHEMA_VERSION)),
            )

    @property
    def schema_version(self) -> int:
        """The schema version stored in the database."""
        cur = self.cursor()
        cur.execute(f"SELECT value FROM meta WHERE key = {self.dialect.param}", ("schema_version",))
        return int(cur.fetchone()[0])

    # -- writing -------------------------------------------------------------------

    def insert(self, rows: list[tuple[Any, ...]]) -> None:
        """Insert ``rows`` (:data:`~promptcache.ledger.schema.COLUMNS` order, as
        :func:`~promptcache.ledger.records.build_row` makes them) in ONE committed transaction;
        ids already stored are skipped. All or nothing."""
        try:
            with self.write() as cur:
                self._insert(cur, rows)
        except BaseException:
            self._known_segments = set()  # the rolled-back segments are not stored
            raise

    def _insert_sql(self) -> str:
        d = self.dialect
        cols = ", ".join(COLUMNS)
        marks = ", ".join([d.param] * len(COLUMNS))
        return f"{d.insert_ignore} requests ({cols}) VALUES ({marks}){d.conflict_tail}"

    def _with_price_ids(self, cur: Any, rows: list[tuple]) -> list[tuple]:
        """Replace each row's price JSON by the id of its row in ``prices`` (inserted when
        new), inside the caller's write transaction."""
        cache, d, col = self._price_ids, self.dialect, _PRICE_COL
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

    def _with_segments(self, cur: Any, rows: list[tuple]) -> list[tuple]:
        """Store the atoms of segments not stored yet and put each row's chain JSON in
        place of its :class:`~promptcache.ledger.records.Atoms` carrier (inside the caller's
        write transaction)."""
        known, d, col = self._known_segments, self.dialect, _CHAIN_COL
        out, new = [], {}
        for row in rows:
            carrier = row[col]
            if isinstance(carrier, Atoms):
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
        rows = self._with_segments(cur, self._with_price_ids(cur, rows))
        seen: set[str] = set()
        uniq = []
        for r in rows:  # the first row of each record_id
            if r[0] not in seen:
                seen.add(r[0])
                uniq.append(r)
        new = (
            self._insert_new_sqlite(cur, uniq)
            if self.url is None
            else self._insert_new_pg(cur, uniq)
        )
        if new:
            self._add_to_rollup(cur, new)

    def _insert_new_sqlite(self, cur: Any, rows: list[tuple]) -> list[tuple]:
        # BEGIN IMMEDIATE holds the write lock: what exists now cannot change under us
        existing: set[str] = set()
        ids = [r[0] for r in rows]
        for i in range(0, len(ids), 500):
            chunk = ids[i : i + 500]
            cur.execute(
                f"SELECT record_id FROM requests WHERE record_id IN ({', '.join('?' * len(chunk))})",
                chunk,
            )
            existing.update(x[0] for x in cur.fetchall())
        new = [r for r in rows if r[0] not in existing]
        if new:
            cur.executemany(self._insert_sql(), new)
        return new

    def _insert_new_pg(self, cur: Any, rows: list[tuple]) -> list[tuple]:
        cur.executemany(self._insert_sql() + " RETURNING record_id", rows, returning=True)
        inserted: set[str] = set()
        while True:
            got = cur.fetchone()
            if got is not None:
                inserted.add(got[0])
            if not cur.nextset():
                break
        return [r for r in rows if r[0] in inserted]

    def _add_to_rollup(self, cur: Any, rows: list[tuple]) -> None:
        agg: dict[tuple, list] = {}
        for r in rows:
            key = tuple(r[_IDX[c]] or "" for c in ("provider", "model", "prefix_hash", "api"))
            key = (int(r[_IDX["ts"]] // 3600), *key)
            a = agg.get(key)
            if a is None:
                a = agg[key] = [0] * 12 + [0.0, 0]
            _add_row_to_sums(a, r)
        d = self.dialect
        cols = ("hour", "provider", "model", "prefix_hash", "api") + ROLLUP_SUMS
        upd = ", ".join(f"{c} = rollup.{c} + excluded.{c}" for c in ROLLUP_SUMS)
        sql = (
            f"INSERT INTO rollup ({', '.join(cols)}) VALUES "
            f"({', '.join([d.param] * len(cols))}) ON CONFLICT (hour, provider, model, "
            f"prefix_hash, api) DO UPDATE SET {upd}"
        )
        # sorted keys: concurrent PostgreSQL writers lock rollup rows in the same order
        cur.executemany(sql, [k + tuple(v[:12]) + (v[12], v[13]) for k, v in sorted(agg.items())])


def _add_row_to_sums(a: list[Any], r: tuple[Any, ...]) -> None:
    """Add one ``requests`` row to a rollup accumulator (:data:`ROLLUP_SUMS` order)."""
    un, rd, wr, out = (
        r[_IDX["uncached_input_tokens"]],
        r[_IDX["cache_read_tokens"]],
        r[_IDX["cache_write_tokens"]],
        r[_IDX["output_tokens"]],
    )
    rep = r[_IDX["cache_reported"]]
    cost_p, base_p, lat = r[_IDX["cost_pusd"]], r[_IDX["baseline_pusd"]], r[_IDX["latency_ms"]]
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
