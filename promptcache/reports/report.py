"""``promptcache report``: summarize the ledger as a terminal table, JSON, or an HTML page.

``promptcache report [--db PATH] [--since 7d] [--by model] [--json] [--html report.html]
[--prices FILE] [--serve [--port 8789]]``

``--serve`` serves the live view instead (:mod:`promptcache.reports.live`): a page that
follows the ledger as calls arrive (hit rate and cost over time, misses by cause, the top
offending paths, a drill-down per call), the same page the proxy serves at ``/_promptcache/``.

The table has one row per group (provider, model, prefix hash, day, hour or API) with
requests, prompt tokens, cache-read and cache-write tokens, the token-weighted hit rate
(``n/a`` where the provider did not report caching: unknown is not a miss), cost, the
no-cache baseline and the saving, in USD. ``--html`` writes a self-contained page (inline
SVG charts, no scripts or network): hit rate over time, cost and saving by model, and the
prefixes with the most misses.

Misses by cause (:mod:`promptcache.reports.misses`) follow in all three formats: the
requests and missed tokens per attributed cause and the top offenders with their JSON
paths. ``--fail-under-hit-rate 0.8`` and ``--fail-on prefix_changed`` exit 1 (with one line
per failed guard) for CI checks on recorded test traffic.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections.abc import Callable
from typing import Any

from promptcache.errors import PromptCacheError
from promptcache.ledger.pricing import read_prices
from promptcache.ledger.summary_table import format_table, money, prefix_label, unpriced_note
from promptcache.ledger.tracker import LedgerError, Tracker, default_path, parse_since
from promptcache.misses.cause import MISS_CAUSES
from promptcache.reports import calls
from promptcache.reports.html import write_html
from promptcache.reports.misses import format_misses, guard_failures, miss_report, misses_json
from promptcache.reports.reprice import repriced_summary

__all__ = [
    "add_arguments",
    "run",
    "format_table",
    "summary_json",
    "money",
    "prefix_label",
    "unpriced_note",
]


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
    parser.add_argument(
        "--html", metavar="FILE", help="also write an HTML report to FILE (grouped by --by too)"
    )
    parser.add_argument(
        "--serve",
        action="store_true",
        help="serve the live view (updates as calls arrive) on http://127.0.0.1:8789/ "
        "until Ctrl-C; needs the [proxy] extra",
    )
    parser.add_argument("--port", type=int, default=8789, help="port of --serve (default 8789)")
    parser.add_argument(
        "--host",
        default="127.0.0.1",
        help="address of --serve (default 127.0.0.1: this machine only)",
    )
    parser.add_argument(
        "--prices",
        metavar="FILE",
        default=None,
        help="reprice the recorded requests with this prices TOML file (format below; "
        "default: $PROMPTCACHE_PRICES when set)",
    )
    parser.add_argument(
        "--fail-under-hit-rate",
        type=_fraction,
        default=None,
        metavar="RATE",
        help="exit 1 when the token-weighted cache hit rate is under RATE (0..1, e.g. 0.8), "
        "or unknown; a CI guard on recorded test traffic",
    )
    parser.add_argument(
        "--fail-on",
        type=_causes,
        action="extend",
        default=[],
        metavar="CAUSE[,CAUSE]",
        help="exit 1 when any request missed with one of these causes: " + ", ".join(MISS_CAUSES),
    )
    calls.add_arguments(parser)
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = PRICES_HELP


def _fraction(value: str) -> float:
    try:
        rate = float(value)
    except ValueError:
        rate = -1.0
    if not 0.0 <= rate <= 1.0:
        raise argparse.ArgumentTypeError(f"{value!r} is not a rate between 0 and 1 (e.g. 0.8)")
    return rate


def _causes(value: str) -> list[str]:
    causes = [c.strip() for c in value.split(",") if c.strip()]
    bad = [c for c in causes if c not in MISS_CAUSES]
    if bad or not causes:
        raise argparse.ArgumentTypeError(
            f"unknown cause {', '.join(bad) or value!r}; choose from {', '.join(MISS_CAUSES)}"
        )
    return causes


PRICES_HELP = """\
prices file (--prices FILE, or the PROMPTCACHE_PRICES environment variable), TOML, USD per
million tokens, one table per model; the bundled promptcache/data/prices.toml has the
same shape:

  [models."acme-llm-7"]
  input = "2"             # required: uncached input tokens
  output = "10"           # required: output tokens
  cache_read = "0.20"     # tokens read from the cache (unknown if left out)
  cache_write_5m = "2.50" # cache writes with a 5-minute TTL (Anthropic, Bedrock)
  cache_write_1h = "4"    # ... with a 1-hour TTL
  cache_write = { "30m" = "2", "12h" = "2" }  # other TTL labels (OpenAI)
  aliases = ["acme-llm-7-latest"]
  source = "https://acme.example/pricing"     # where the figures come from
  date = "2026-11-30"                         # when they were read

A request whose model the file prices is repriced with the file's row (over the cost
stored when it was recorded); a request recorded without a price takes the file's or
the bundled row when there is one now. A model with no known price shows n/a, never $0.
"""


def _by(value: str) -> str:

    if value in ("provider", "model", "prefix_hash", "day", "hour", "api") or re.fullmatch(
        r"metadata\.[A-Za-z0-9_]{1,64}", value
    ):
        return value
    raise argparse.ArgumentTypeError(
        f"invalid choice: {value!r} (choose provider, model, prefix_hash, day, hour, api or "
        "metadata.KEY)"
    )


def summary_json(rows: list[Any], by: str, total: Any) -> dict[str, Any]:
    """The ``--json`` document."""
    return {"by": by, "rows": [r.to_dict() for r in rows], "total": total.to_dict()}


def _check_writable(path: str) -> str | None:
    """Why ``path`` cannot be written (a one-line reason), or None; nothing is created."""
    target = os.path.abspath(path)
    parent = os.path.dirname(target)
    if os.path.isdir(target):
        return "it is a directory"
    if not os.path.isdir(parent):
        return f"no such directory: {parent}"
    if not os.access(parent, os.W_OK) or (
        os.path.exists(target) and not os.access(target, os.W_OK)
    ):
        return "permission denied"
    return None


def _serve(args: argparse.Namespace, db: str, fail: Callable[[str], int]) -> int:
    """``--serve``: the live view over ``db`` (created empty when missing: it fills as a
    proxy or a wrapped client records into it)."""
    import importlib.util

    from promptcache.reports.live import NEEDS, serve

    if any(importlib.util.find_spec(m) is None for m in ("starlette", "uvicorn")):
        return fail(NEEDS)
    if not 0 <= args.port <= 65535:
        return fail(f"--port {args.port}: use 0..65535")
    try:
        tracker = Tracker(db)
    except LedgerError as e:
        return fail(str(e))
    print(
        f"promptcache report: live view of {tracker.location} on "
        f"http://{args.host}:{args.port}/ (Ctrl-C to stop)",
        file=sys.stderr,
    )
    try:
        serve(tracker, host=args.host, port=args.port)
    finally:
        tracker.close()
    return 0


def run(args: argparse.Namespace) -> int:
    """Print the report; exit 0, or 2 with one line on a bad argument, ledger, prices file
    or output path (checked before anything is printed)."""

    def fail(msg: str) -> int:
        print(f"promptcache report: {msg}", file=sys.stderr)
        return 2

    try:
        parse_since(args.since)
    except ValueError as e:
        return fail(str(e))
    if args.html:
        why = _check_writable(args.html)
        if why:
            return fail(f"cannot write {args.html}: {why}")
    prices_path = args.prices or os.environ.get("PROMPTCACHE_PRICES") or None
    table = None
    if prices_path:
        try:
            table = read_prices(prices_path)
        except OSError as e:
            return fail(f"cannot read prices file {prices_path}: {e.strerror}")
        except PromptCacheError as e:
            return fail(str(e))
    db = args.db or default_path()
    if getattr(args, "serve", False):
        return _serve(args, db, fail)
    if "://" not in db and not os.path.exists(db):
        return fail(
            f"no ledger at {db}; record some calls with promptcache.wrap(client) first, "
            "or pass --db PATH"
        )
    try:
        tracker = Tracker(db)
        if getattr(args, "calls", False):
            return _list_calls(tracker, args)
        if table is None:

            def summarize(by: str | None) -> list[Any]:
                return list(tracker.summary(by=by, since=args.since))
        else:
            records = tracker.records(since=args.since)
            price_table = table

            def summarize(by: str | None) -> list[Any]:
                return repriced_summary(records, by, price_table)

        rows = summarize(args.by)
        overall = summarize(None)
    except (PromptCacheError, LedgerError) as e:
        return fail(str(e))
    total = overall[0] if overall else None
    misses = miss_report(tracker, since=args.since)
    coverage = tracker.usage_coverage(since=args.since)
    if args.json:
        doc = (
            summary_json(rows, args.by, total)
            if total
            else {"by": args.by, "rows": [], "total": None}
        )
        doc["misses"] = misses_json(misses)
        doc["usage"] = calls.coverage_json(*coverage)
        print(json.dumps(doc, indent=2))
    elif total is None:
        print(
            f"no requests in the ledger {tracker.location}"
            + (f" since {args.since}" if args.since else "")
        )
    else:
        print(format_table(rows, args.by, total))
        note = calls.coverage_note(*coverage)
        if note:
            print(note)
        section = format_misses(misses)
        if section:
            print(section)
    if args.html:
        try:
            write_html(tracker, args.html, since=args.since, by=args.by, summarize=summarize)
        except OSError as e:
            return fail(f"cannot write {args.html}: {e.strerror}")
        print(f"wrote {args.html}", file=sys.stderr)
    tracker.close()
    failed = guard_failures(
        misses,
        total.hit_rate if total is not None else None,
        fail_under=args.fail_under_hit_rate,
        fail_on=args.fail_on,
    )
    for line in failed:
        print(f"promptcache report: FAIL: {line}", file=sys.stderr)
    return 1 if failed else 0


def _list_calls(tracker: Tracker, args: argparse.Namespace) -> int:
    """``--calls``: one line (or JSON object) per call, oldest first."""
    records = tracker.records(since=args.since, limit=args.limit)
    if args.json:
        print(json.dumps([calls.call_row(r) for r in records], indent=2))
    else:
        print(calls.format_calls(records))
        note = calls.coverage_note(*tracker.usage_coverage(since=args.since))
        if note:
            print(note)
    tracker.close()
    return 0
