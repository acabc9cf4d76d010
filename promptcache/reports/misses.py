"""The misses section of ``promptcache report``: requests by cause, the top offenders with
their JSON paths, and the CI guards ``--fail-under-hit-rate`` and ``--fail-on``.

Causes are those :mod:`promptcache.misses.cause` attributes to each recorded request
(``Record.miss_cause``); *missed tokens* are prompt tokens not read from the cache. The
same numbers come out as a terminal table (:func:`format_misses`), as the ``"misses"`` key of
``--json`` (:func:`misses_json`) and as a chart plus a table in the HTML page
(:func:`misses_html`: ``data-chart="miss-causes"``, one bar per cause with
``data-key``/``data-value``).
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from promptcache.misses.cause import CAUSES, MISS_CAUSES

__all__ = [
    "MissReport",
    "miss_report",
    "format_misses",
    "misses_json",
    "misses_html",
    "guard_failures",
]


@dataclass(frozen=True)
class MissReport:
    """Requests and missed tokens per miss cause (in :data:`CAUSES` order, only causes seen;
    never ``"hit"``), the hits apart (``hits``: the same fields, None when no request hit), and
    the top offender groups (cause, path, model), most missed tokens first. ``attributed``
    counts every attributed request, hits included."""

    by_cause: list[dict[str, Any]] = field(default_factory=list)
    offenders: list[dict[str, Any]] = field(default_factory=list)
    attributed: int = 0
    hits: dict[str, Any] | None = None

    @property
    def missed_requests(self) -> int:
        """Attributed requests whose cause is a miss."""
        return sum(c["requests"] for c in self.by_cause)


def miss_report(tracker: Any, since: Any = None, *, top: int = 10) -> MissReport:
    """Build the section from ``tracker.miss_groups`` (``top``: offenders kept)."""
    groups = tracker.miss_groups(since=since)
    per: dict[str, dict[str, Any]] = {}
    for g in groups:
        c = per.setdefault(
            g["cause"],
            {"cause": g["cause"], "requests": 0, "prompt_tokens": 0, "missed_tokens": 0},
        )
        c["requests"] += g["requests"]
        c["prompt_tokens"] += g["prompt_tokens"]
        c["missed_tokens"] += g["missed_tokens"]
    order = {c: i for i, c in enumerate(CAUSES)}
    by_cause = sorted(per.values(), key=lambda c: order.get(c["cause"], len(order)))
    offenders = [g for g in groups if g["cause"] in MISS_CAUSES and g["missed_tokens"] > 0]
    return MissReport(
        by_cause=[c for c in by_cause if c["cause"] in MISS_CAUSES],  # a hit is not a miss
        offenders=offenders[:top],
        attributed=sum(g["requests"] for g in groups),
        hits=per.get("hit"),
    )


def _table(head: Sequence[str], rows: list[list[str]]) -> list[str]:
    widths = [
        max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(head)
    ]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(
            c.ljust(w) if i == 0 or i == len(cells) - 1 and head[-1] == "path" else c.rjust(w)
            for i, (c, w) in enumerate(zip(cells, widths))
        ).rstrip()

    return [line(head), "  ".join("-" * w for w in widths), *(line(r) for r in rows)]


def format_misses(report: MissReport) -> str:
    """The terminal section: misses by cause, then the top offenders with their paths
    (empty when no request in the period was attributed)."""
    if not report.attributed:
        return ""  # nothing attributed (recorded without request bodies): no section
    hit = report.hits["requests"] if report.hits else 0
    lines = [
        "",
        f"misses by cause ({report.attributed:,} attributed request(s): {hit:,} hit, "
        f"{report.missed_requests:,} missed)",
    ]
    if not report.by_cause:
        return "\n".join(lines)
    lines += _table(
        ["cause", "requests", "prompt tok", "missed tok"],
        [
            [c["cause"], str(c["requests"]), f"{c['prompt_tokens']:,}", f"{c['missed_tokens']:,}"]
            for c in report.by_cause
        ],
    )
    if report.offenders:
        lines += ["", "top offenders"]
        lines += _table(
            ["cause", "requests", "missed tok", "model", "path"],
            [
                [
                    o["cause"],
                    str(o["requests"]),
                    f"{o['missed_tokens']:,}",
                    o["model"] or "-",
                    o["path"] or "-",
                ]
                for o in report.offenders
            ],
        )
    return "\n".join(lines)


def misses_json(report: MissReport) -> dict[str, Any]:
    """The ``"misses"`` document of ``--json``."""
    return {
        "attributed_requests": report.attributed,
        "hits": report.hits,
        "by_cause": report.by_cause,
        "top_offenders": report.offenders,
    }


def _esc(x: Any) -> str:
    return html.escape(str(x), quote=True)


def misses_html(report: MissReport) -> str:
    """The HTML section: a bar chart of missed tokens per cause and the offenders table."""
    parts = ["<h2>Misses by cause</h2>"]
    if not report.attributed:
        return parts[0] + "<p>No attributed requests in this period.</p>"
    rows = report.by_cause
    if not rows:
        return parts[0] + "<p>No attributed request missed the cache in this period.</p>"
    width, bar_h, gap, lab_w, iw = 760, 14, 8, 150, 340
    height = 16 + len(rows) * (bar_h + gap) + 24
    vmax = max((c["missed_tokens"] for c in rows), default=0) or 1
    svg = [f'<svg data-chart="miss-causes" width="{width}" height="{height}" role="img">']
    y = 16
    for c in rows:
        w = max(0.0, iw * c["missed_tokens"] / vmax)
        text = f"{c['missed_tokens']:,} tokens missed, {c['requests']} request(s)"
        svg.append(
            f'<text x="{lab_w - 6}" y="{y + bar_h - 3}" text-anchor="end">{_esc(c["cause"])}</text>'
            f'<rect class="bar miss" x="{lab_w}" y="{y}" width="{w:.1f}" height="{bar_h - 2}" '
            f'data-key="{_esc(c["cause"])}" data-series="missed" '
            f'data-value="{c["missed_tokens"]}" data-requests="{c["requests"]}">'
            f"<title>{_esc(c['cause'])}: {_esc(text)}</title></rect>"
            f'<text x="{lab_w + w + 4:.1f}" y="{y + bar_h - 3}">{_esc(text)}</text>'
        )
        y += bar_h + gap
    svg.append(f'<text x="{lab_w}" y="{height - 6}">prompt tokens not read from the cache</text>')
    svg.append("</svg>")
    parts.append("".join(svg))
    if report.hits is not None:
        parts.append(f"<p class='sub'>{report.hits['requests']:,} request(s) hit.</p>")
    if report.offenders:
        parts.append(
            "<h2>Top offenders</h2><table data-table='miss-offenders'><tr><th>path</th>"
            "<th>cause</th><th>requests</th><th>missed tokens</th><th>model</th></tr>"
        )
        for o in report.offenders:
            parts.append(
                f"<tr><td>{_esc(o['path'] or '-')}</td><td>{_esc(o['cause'])}</td>"
                f"<td>{o['requests']:,}</td><td>{o['missed_tokens']:,}</td>"
                f"<td>{_esc(o['model'] or '-')}</td></tr>"
            )
        parts.append("</table>")
    return "".join(parts)


def guard_failures(
    report: MissReport,
    hit_rate: float | None,
    *,
    fail_under: float | None = None,
    fail_on: Sequence[str] = (),
) -> list[str]:
    """One line per failed CI guard: the overall token-weighted ``hit_rate`` under
    ``fail_under`` (an unknown rate fails too: nothing reported cache use), and each cause
    of ``fail_on`` that occurred."""
    out = []
    if fail_under is not None:
        if hit_rate is None:
            out.append(
                f"hit rate unknown (no request reported cache use), required {fail_under:.1%}"
            )
        elif hit_rate < fail_under:
            out.append(f"hit rate {hit_rate:.1%} is under the required {fail_under:.1%}")
    seen = {c["cause"]: c for c in report.by_cause}
    for cause in fail_on:
        if cause in seen:
            c = seen[cause]
            where = [o["path"] for o in report.offenders if o["cause"] == cause and o["path"]]
            at = f" at {', '.join(dict.fromkeys(where))}" if where else ""
            out.append(f"{c['requests']} request(s) missed with {cause}{at}")
    return out
