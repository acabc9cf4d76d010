"""``promptcache report``: summarize the ledger as a terminal table, JSON, or an HTML page.

``promptcache report [--db PATH] [--since 7d] [--by model] [--json] [--html report.html]``

The table has one row per group (provider, model, prefix hash, day, hour or API) with
requests, prompt tokens, cache-read and cache-write tokens, the token-weighted hit rate
(``n/a`` where the provider did not report caching: unknown is not a miss), cost, the
no-cache baseline and the saving, in USD. ``--html`` writes a self-contained page (inline
SVG charts, no scripts or network): hit rate over time, cost and saving by model, and the
prefixes with the most misses.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from decimal import Decimal
from typing import Any

from promptcache.errors import PromptCacheError
from promptcache.ledger import LedgerError, Tracker, default_path, parse_since
from promptcache.report_html import write_html

__all__ = ["add_arguments", "run", "format_table", "summary_json"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``promptcache report``."""
    parser.add_argument(
        "--db",
        metavar="PATH",
        help="ledger file or postgresql:// URL (default: $PROMPTCACHE_LEDGER "
        "or the user data directory)",
    )
    parser.add_argument(
        "--since",
        default=None,
        metavar="WHEN",
        help="only requests since WHEN: 30m, 24h, 7d, 2w or an ISO date",
    )
    parser.add_argument(
        "--by",
        default="model",
        type=_by,
        help="group rows by provider, model, prefix_hash, day, hour, api or "
        "metadata.KEY (e.g. metadata.demo_run; default: model)",
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument("--html", metavar="FILE", help="also write an HTML report to FILE")


def _by(value: str) -> str:

    if value in ("provider", "model", "prefix_hash", "day", "hour", "api") or re.fullmatch(
        r"metadata\.[A-Za-z0-9_]{1,64}", value
    ):
        return value
    raise argparse.ArgumentTypeError(
        f"invalid choice: {value!r} (choose provider, model, prefix_hash, day, hour, api or "
        "metadata.KEY)"
    )


def _usd(x: Decimal) -> str:
    q = (
        x.quantize(Decimal("0.0001"))
        if abs(x) >= Decimal("0.01")
        else x.quantize(Decimal("0.000001"))
    )
    return f"${q}"


def _rate(r: float | None) -> str:
    return "n/a" if r is None else f"{r:.1%}"


def format_table(rows: list[Any], by: str, total: Any | None = None) -> str:
    """The terminal table for ``Tracker.summary`` rows (plus an optional total row)."""
    head = [
        by,
        "requests",
        "prompt tok",
        "cache read",
        "cache write",
        "output",
        "hit rate",
        "cost",
        "no-cache",
        "saving",
    ]
    body = []
    for r in list(rows) + ([total] if total is not None else []):
        key = "TOTAL" if r is total else (r.key if r.key is not None else "-")
        if by == "prefix_hash" and r is not total and len(key) > 16:
            key = key[:16]
        rate = _rate(r.hit_rate)
        if r.unreported_requests and r.hit_rate is not None:
            rate += "*"
        body.append(
            [
                key,
                str(r.requests),
                f"{r.prompt_tokens:,}",
                f"{r.cache_read_tokens:,}",
                f"{r.cache_write_tokens:,}",
                f"{r.output_tokens:,}",
                rate,
                _usd(r.cost),
                _usd(r.baseline),
                _usd(r.saving),
            ]
        )
    widths = [
        max(len(h), *(len(row[i]) for row in body)) if body else len(h) for i, h in enumerate(head)
    ]
    lines = [
        "  ".join(
            h.ljust(w) if i == 0 else h.rjust(w) for i, (h, w) in enumerate(zip(head, widths))
        )
    ]
    lines.append("  ".join("-" * w for w in widths))
    for row in body:
        lines.append(
            "  ".join(
                c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths))
            )
        )
    notes = []
    unreported = sum(r.unreported_requests for r in rows)
    unpriced = sum(r.unpriced_requests for r in rows)
    if unreported:
        notes.append(
            f"{unreported} request(s) came from servers that did not report cached "
            "tokens (hit rate unknown, not a miss; * = rate over the others). "
            "vLLM: --enable-prompt-tokens-details; SGLang: --enable-cache-report."
        )
    if unpriced:
        notes.append(
            f"{unpriced} request(s) have no known price (cost counted as $0); "
            "add one with promptcache.Price or a prices TOML file."
        )
    return "\n".join(lines + notes)


def summary_json(rows: list[Any], by: str, total: Any) -> dict[str, Any]:
    """The ``--json`` document."""
    return {"by": by, "rows": [r.to_dict() for r in rows], "total": total.to_dict()}


def run(args: argparse.Namespace) -> int:
    """Print the report; exit 0, or 2 with one line on a bad argument or ledger."""

    try:
        parse_since(args.since)
    except ValueError as e:
        print(f"promptcache report: {e}", file=sys.stderr)
        return 2
    db = args.db or default_path()
    if "://" not in db and not os.path.exists(db):
        print(
            f"promptcache report: no ledger at {db}; record some calls with "
            "promptcache.wrap(client) first, or pass --db PATH",
            file=sys.stderr,
        )
        return 2
    try:
        tracker = Tracker(db)
        rows = tracker.summary(by=args.by, since=args.since)
        overall = tracker.summary(by=None, since=args.since)
    except (PromptCacheError, LedgerError) as e:
        print(f"promptcache report: {e}", file=sys.stderr)
        return 2
    total = overall[0] if overall else None
    if args.json:
        print(
            json.dumps(
                summary_json(rows, args.by, total)
                if total
                else {"by": args.by, "rows": [], "total": None},
                indent=2,
            )
        )
    elif total is None:
        print(
            f"no requests in the ledger {tracker}" + (f" since {args.since}" if args.since else "")
        )
    else:
        print(format_table(rows, args.by, total))
    if args.html:
        try:
            write_html(tracker, args.html, since=args.since)
        except OSError as e:
            print(f"promptcache report: cannot write {args.html}: {e.strerror}", file=sys.stderr)
            return 2
        print(f"wrote {args.html}", file=sys.stderr)
    tracker.close()
    return 0
