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

import logging
import os
import time
from collections.abc import Iterable, Mapping
from typing import Any

from promptcache.errors import PromptCacheError
from promptcache.ledger import queries
from promptcache.ledger.pricing import Cost, Price, cost_pico, warn_unknown_price
from promptcache.ledger.queries import (
    GROUPS,
    PREDECESSOR_CANDIDATES,
    PREDECESSOR_WINDOW_S,
)
from promptcache.ledger.records import (
    PICO,
    Record,
    Summary,
    SummaryRow,
    build_row,
    parse_since,
    price_json,
    pusd,
)
from promptcache.ledger.schema import SCHEMA_VERSION, Dialect
from promptcache.ledger.store import ENV_VAR, LedgerError, Store, default_path
from promptcache.misses.attribution import Attributed, Attributor, api_of_request
from promptcache.misses.cause import Observation
from promptcache.misses.digest_chain import APIS, DigestChain
from promptcache.providers.usage_record import USAGE_UNKNOWN, Usage

__all__ = [
    "Tracker",
    "LedgerError",
    "Record",
    "SummaryRow",
    "Summary",
    "default_path",
    "parse_since",
    "SCHEMA_VERSION",
    "ENV_VAR",
    "GROUPS",
    "PICO",
    "PREDECESSOR_CANDIDATES",
    "PREDECESSOR_WINDOW_S",
]

log = logging.getLogger("promptcache.ledger.tracker")


class Tracker:
    """A ledger of requests (SQLite in WAL mode, or PostgreSQL for a ``postgresql://``
    URL): what users hold. Storage is :class:`~promptcache.ledger.store.Store`'s, the
    queries are :mod:`promptcache.ledger.queries`'; this class prices and attributes each
    request, builds its row, and gives the queries one object to be called on.

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
        self.store_prompts = store_prompts
        self.attributor = Attributor()
        self.busy_timeout_s = busy_timeout_s
        self.store = Store(target, synchronous=synchronous, busy_timeout_s=busy_timeout_s)
        self.synchronous = self.store.synchronous

    # -- the store -------------------------------------------------------------------

    @property
    def path(self) -> str | None:
        """The SQLite file's absolute path (None for PostgreSQL)."""
        return self.store.path

    @property
    def url(self) -> str | None:
        """The PostgreSQL URL (None for SQLite)."""
        return self.store.url

    @property
    def dialect(self) -> type[Dialect]:
        """The SQL dialect of the store."""
        return self.store.dialect

    @property
    def location(self) -> str:
        """Where the ledger lives: its file path, or its URL with any password hidden."""
        return self.store.location

    @property
    def schema_version(self) -> int:
        """The schema version stored in the database."""
        return self.store.schema_version

    def __repr__(self) -> str:
        return f"Tracker({self.location!r})"

    def _conn(self) -> Any:
        return self.store.conn()

    def close(self) -> None:
        """Close every connection this Tracker opened (in any thread)."""
        self.store.close()

    def __enter__(self) -> Tracker:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- writing ---------------------------------------------------------------------

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
        cache_note: str | None = None,
    ) -> tuple[Any, ...]:
        if not isinstance(usage, Usage):
            raise TypeError(
                "Tracker.record needs a promptcache.Usage; convert a response "
                "with promptcache.normalize_usage(provider, response) first"
            )
        model = model or usage.model
        ts = time.time() if ts is None else float(ts)
        if attributed is None and request is not None:
            attributed = self.attribute(
                request,
                usage,
                ts=ts,
                api=api,
                model=model,
                lineage=lineage,
                rules=rules,
                cache_note=cache_note,
            )
        return build_row(
            usage,
            record_id=record_id,
            ts=ts,
            model=model,
            provider=provider or usage.provider,
            api=api,
            prefix_hash=prefix_hash,
            cost_pusd=_priced(usage, model, price, cost),
            latency_ms=latency_ms,
            ttft_ms=ttft_ms,
            stream=stream,
            metadata=metadata,
            prompt=prompt,
            store_prompts=self.store_prompts,
            attributed=attributed,
            retention=request.get("prompt_cache_retention") if request is not None else None,
        )

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
        ``store_prompts``), ``lineage`` (the key of the conversation it belongs to; default:
        the predecessor is found by shared prefix among the recent requests of the same
        provider and model, :mod:`promptcache.misses.lineage`), ``rules`` (a
        :class:`~promptcache.limits.CacheLimits` to apply instead of the model's row),
        ``cache_note`` (the serving engine's note on why it cached nothing, e.g. the local
        engine's ``X-Promptcache-Cache-Note`` header).

        A ``usage`` flagged :data:`~promptcache.providers.usage_record.USAGE_UNKNOWN` (the
        response carried no usage) is stored without a cost and without a cause.
        """
        row = self._row(usage, **fields)
        self.store.insert([row])
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
            self.store.insert(rows)
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
        cache_note: str | None = None,
    ) -> Attributed:
        """The miss attribution :meth:`record` stores for ``request`` (see there); this
        request becomes a candidate predecessor in this process."""
        model = model or usage.model
        if usage.model != model:
            usage = usage.replace(model=model)
        chain_api = api if api in APIS else api_of_request(request)
        return self.attributor.attribute(
            request,
            chain_api,
            usage,
            time.time() if ts is None else float(ts),
            lineage=lineage,
            rules=rules,
            fallback=lambda chain: self.predecessor(chain, model=model, before=ts, lineage=lineage),
            note=cache_note,
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
        return queries.predecessor(self.store, chain, model=model, before=before, lineage=lineage)

    def miss_groups(self, since: Any = None, until: Any = None) -> list[dict[str, Any]]:
        """Attributed requests grouped by (cause, path, model): ``requests``,
        ``prompt_tokens``, ``cache_read_tokens``, ``missed_tokens`` (prompt tokens not read
        from the cache), ``matched_tokens`` (sum of ``matched_prefix_tokens``) and the latest
        ``last_ts``; most missed tokens first. Requests without a cause are left out. Raises
        ``ValueError`` for a bad ``since``/``until``."""
        return queries.miss_groups(self.store, since, until)

    def chain(self, record_id: str) -> DigestChain | None:
        """The stored digest chain of a record (with the atoms of its segments), or None."""
        return queries.chain(self.store, record_id)

    # -- reading ---------------------------------------------------------------------

    def count(self) -> int:
        """Number of stored requests."""
        return queries.count(self.store)

    def usage_coverage(self, since: Any = None) -> tuple[int, int, int]:
        """``(requests, requests recorded with usage unknown, requests whose caching was
        reported)`` since ``since`` -- the last is what a hit rate covers."""
        return queries.usage_coverage(self.store, since)

    def summary(self, by: str | None = "provider", since: Any = None, until: Any = None) -> Summary:
        """Aggregate the ledger. ``by``: ``"provider"``, ``"model"``, ``"prefix_hash"``,
        ``"day"`` (UTC date), ``"hour"`` (UTC, ISO text), ``"api"``, ``"miss_cause"`` (the
        attributed cause, :data:`promptcache.misses.cause.CAUSES`; scans the records),
        ``"metadata.KEY"`` (a key of the metadata given to ``record``/``wrap``; scans the
        records), or None for one overall row. ``since``/``until``: see :func:`parse_since`.
        Rows are ordered by key (time groups) or by cost, largest first. Raises
        ``ValueError`` for an unknown ``by``.

        Whole hours are read from the hourly rollup (maintained with every insert);
        only the partial hours at the edges of ``since``/``until`` scan records (by the
        ``ts`` index), so the cost does not grow with the number of records.

        Returns a :class:`Summary`: the list of rows, printing as the report's table."""
        return queries.summary(self.store, by, since, until)

    def records(self, since: Any = None, limit: int | None = None) -> list[Record]:
        """Stored requests, oldest first (``limit``: the most recent N)."""
        return queries.records(self.store, since, limit)

    def time_span(self, since: Any = None) -> tuple[float, float] | None:
        """``(first, last)`` request time (Unix seconds) since ``since``; None if none."""
        return queries.time_span(self.store, since)

    def hit_series(self, bucket_s: int, since: Any = None) -> list[tuple[float, int, int]]:
        """Token-weighted hit-rate inputs per ``bucket_s``-second bucket (UTC-aligned):
        ``[(bucket_start_ts, cache_read_tokens, prompt_tokens), ...]`` over the requests
        whose provider reported caching, oldest first. Scans the records in the period."""
        return queries.hit_series(self.store, bucket_s, since)

    def hit_counts(
        self, by: str | None, min_share: float, since: Any = None
    ) -> dict[str | None, tuple[int, int]]:
        """Per group of ``by`` (``provider``, ``model``, ``prefix_hash``, ``api`` or None):
        ``(hits, reported)`` where ``reported`` counts the requests whose provider reported
        caching and ``hits`` those of them that read at least ``min_share`` (0..1] of their
        prompt tokens from the cache. Scans the records in the period."""
        return queries.hit_counts(self.store, by, min_share, since)


def _priced(
    usage: Usage, model: str | None, price: Price | None, cost: Cost | None
) -> tuple[int | None, int | None, str | None]:
    """``(cost, baseline, price JSON)`` of a request in pico-dollars; all None when no price
    is known (the request is stored unpriced and one warning says so)."""
    if cost is not None:
        return pusd(cost.total), pusd(cost.baseline), price_json(cost.price)
    if USAGE_UNKNOWN in usage.flags:  # no counts: the cost is unknown, not zero
        return None, None, None
    try:
        cost_p, base_p, used = cost_pico(usage, model=model, price=price)
    except PromptCacheError as e:  # unknown price: stored unpriced, not an error
        log.debug("ledger: request recorded without cost: %s", e)
        warn_unknown_price(model, e)
        return None, None, None
    return cost_p, base_p, price_json(used)
