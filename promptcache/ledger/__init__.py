"""The ledger: every recorded request's usage, cost and miss cause, stored and queried.

Owns prices and cost arithmetic (:mod:`~.pricing`, with the bundled price table
``promptcache/data/prices.toml``, each row with its source and date), the storage of records in
SQLite or PostgreSQL with its schema migrations (:mod:`~.store`), the queries over it — summaries,
hit-rate series, miss groups (:mod:`~.queries`), the aligned text table they print as
(:mod:`~.summary_table`) and :class:`Tracker`, the one object users hold (:mod:`~.tracker`). May
import ``promptcache.misses``, ``promptcache.providers`` and the top-level modules; never the
reports, the simulator or the integrations, which read the ledger through ``Tracker``.

``from promptcache.ledger import Tracker`` (the 0.1 module path) keeps working.
"""

from __future__ import annotations

from promptcache.ledger.tracker import (
    ENV_VAR,
    GROUPS,
    LedgerError,
    Record,
    Summary,
    SummaryRow,
    Tracker,
    default_path,
    parse_since,
)

__all__ = [
    "ENV_VAR",
    "GROUPS",
    "LedgerError",
    "Record",
    "Summary",
    "SummaryRow",
    "Tracker",
    "default_path",
    "parse_since",
]
