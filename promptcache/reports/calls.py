"""``promptcache report --calls``: the ledger one call per line, and how much a hit rate covers.

Each line: the time (UTC), the lineage (the conversation the call was attributed in: a
``session:`` key the caller gave or a ``conv:`` key found by shared prefix,
:mod:`promptcache.misses.lineage`), the cause and the JSON path where the prefix changed,
the tokens read from the cache, written to it and missed (prompt tokens not read), the cost
in USD, then provider, API and model. ``--json`` prints the same as a list of objects.
A call recorded with usage unknown (its response carried none) shows ``n/a`` for its counts
and cost, never 0.

:func:`coverage_note` is the sentence every report prints when calls came back without
usage: ``3 calls without usage: hit rate covers 97 of 100``.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable
from datetime import datetime, timezone
from decimal import Decimal
from typing import Any

from promptcache.ledger.records import Record
from promptcache.providers.usage_record import USAGE_UNKNOWN

__all__ = ["add_arguments", "call_row", "format_calls", "coverage_note", "coverage_json"]

_COLUMNS = ("time", "lineage", "cause", "path", "read", "written", "missed", "cost", "model")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``--calls`` and ``--limit`` options of ``promptcache report``."""
    parser.add_argument(
        "--calls",
        action="store_true",
        help="list the calls one per line (time, lineage, cause, path, tokens read/written/"
        "missed, cost) instead of the summary; with --json, as a JSON list",
    )
    parser.add_argument(
        "--limit",
        type=_positive,
        default=None,
        metavar="N",
        help="with --calls: only the most recent N calls",
    )


def _positive(value: str) -> int:
    try:
        n = int(value)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"{value!r} is not a positive number of calls")
    return n


def call_row(record: Record) -> dict[str, Any]:
    """One call as a JSON-ready dict: ``time`` (ISO 8601 UTC), ``lineage``, ``cause``,
    ``path``, ``read``/``written``/``missed`` (tokens; None when the usage is unknown),
    ``cost`` (USD as a string; None when unknown), ``provider``, ``api``, ``model``,
    ``stream``, ``usage_known``."""
    u = record.usage
    known = USAGE_UNKNOWN not in u.flags
    return {
        "time": datetime.fromtimestamp(record.ts, timezone.utc).isoformat(timespec="milliseconds"),
        "lineage": record.lineage,
        "cause": record.miss_cause,
        "path": record.miss_path,
        "read": u.cache_read_tokens if known else None,
        "written": u.cache_write_tokens if known else None,
        "missed": u.prompt_tokens - u.cache_read_tokens if known else None,
        "cost": None if record.cost is None else str(record.cost),
        "provider": record.provider,
        "api": record.api,
        "model": record.model,
        "stream": record.stream,
        "usage_known": known,
    }


def _cell(key: str, value: Any) -> str:
    if value is None:
        return "n/a" if key in ("read", "written", "missed", "cost") else "-"
    if key == "time":
        return str(value).replace("+00:00", "Z")
    if key == "cost":
        q = Decimal(value)
        return f"${q.quantize(Decimal('0.000001'))}"
    return str(value)


def format_calls(records: Iterable[Record]) -> str:
    """The aligned text listing of ``records`` (a header line, then one line per call)."""
    rows = [call_row(r) for r in records]
    if not rows:
        return "no calls in the ledger"
    table = [list(_COLUMNS)] + [[_cell(k, row[k]) for k in _COLUMNS] for row in rows]
    widths = [max(len(line[i]) for line in table) for i in range(len(_COLUMNS))]
    numeric = {"read", "written", "missed", "cost"}
    out = []
    for line in table:
        cells = [
            c.rjust(w) if _COLUMNS[i] in numeric else c.ljust(w)
            for i, (c, w) in enumerate(zip(line, widths))
        ]
        out.append("  ".join(cells).rstrip())
    return "\n".join(out)


def coverage_note(calls: int, unknown: int, reported: int) -> str:
    """The sentence on calls without usage (empty when every call had usage):
    ``"3 calls without usage: hit rate covers 97 of 100"`` (``reported``: the calls whose
    caching was reported, which the hit rate covers)."""
    if not unknown:
        return ""
    noun = "call" if unknown == 1 else "calls"
    return f"{unknown} {noun} without usage: hit rate covers {reported} of {calls}"


def coverage_json(calls: int, unknown: int, reported: int) -> dict[str, int]:
    """The same as :func:`coverage_note`, for ``--json``."""
    return {"calls": calls, "calls_without_usage": unknown, "hit_rate_covers": reported}
