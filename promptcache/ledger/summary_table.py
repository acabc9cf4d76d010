"""The terminal table of ledger summaries (``promptcache report`` and ``str()`` of
:class:`promptcache.ledger.tracker.Summary`), and the labels every report format shares: USD
amounts (``n/a`` when no request of a group has a known price), prefix labels, notes.

A leaf module: it formats :class:`~promptcache.ledger.tracker.SummaryRow`-shaped objects and
imports nothing else of promptcache.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

__all__ = ["format_table", "money", "unpriced_note", "prefix_label"]


def _usd(x: Decimal) -> str:
    q = (
        x.quantize(Decimal("0.0001"))
        if abs(x) >= Decimal("0.01")
        else x.quantize(Decimal("0.000001"))
    )
    return f"${q}"


def money(row: Any, amount: Decimal) -> str:
    """A group's USD amount as printed: ``n/a`` when no request of the group has a known
    price, a trailing ``+`` when some are left out (the sum covers the priced ones)."""
    if row.priced_requests == 0:
        return "n/a"
    return _usd(amount) + ("+" if row.unpriced_requests else "")


def unpriced_note(unpriced: int) -> str:
    """The sentence under a table whose costs leave requests out (empty when none)."""
    if not unpriced:
        return ""
    return (
        f"costs leave out {unpriced} request(s) with no known price (n/a; + marks a sum "
        "over the priced requests only); price them with `promptcache report --prices "
        "FILE` or PROMPTCACHE_PRICES (see --help)."
    )


def prefix_label(key: str | None) -> str:
    """One short label for a prefix id: its first 16 hex digits, whether the id is a
    SHA-256 of the request head or promptcache.build's ``prompt_cache_key`` (``pc-`` +
    hex, shown without the ``pc-``)."""
    if key is None:
        return "-"
    if key.startswith("pc-") and all(c in "0123456789abcdef" for c in key[3:]):
        key = key[3:]
    return key[:16]


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
        if by == "prefix_hash" and r is not total:
            key = prefix_label(r.key)
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
                money(r, r.cost),
                money(r, r.baseline),
                money(r, r.saving),
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
        notes.append(unpriced_note(unpriced))
    return "\n".join(lines + notes)
