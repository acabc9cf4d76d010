"""The HTML page of ``promptcache report --html FILE``.

One self-contained file: inline CSS and inline SVG charts, no scripts, no fonts or
libraries fetched from anywhere (it opens offline and in locked-down viewers).

Charts (each SVG carries ``data-chart`` and every mark ``data-key``/``data-value`` so the
numbers can be read back from the DOM):

1. ``hit-rate``: token-weighted cache hit rate per time bucket, the bucket picked from the
   period's span (10 s for a short run up to a day or a week; at most 48 points), its time
   labels thinned to fit (:mod:`promptcache.reports.time_axis`);
2. ``cost-by-group``: cost vs. the no-cache baseline per ``--by`` group, USD, and the saving;
3. ``prefix-misses``: the prefixes (prefix hashes) with the most missed prompt tokens
   (prompt tokens not read from the cache), with their request counts and how many were
   not hits (a hit reads at least :data:`HIT_MIN_SHARE` of its prompt from the cache);
4. ``miss-causes``: missed prompt tokens per attributed miss cause, then the top offenders
   with their JSON paths (:mod:`promptcache.reports.misses`).
"""

from __future__ import annotations

import html
import os
import time
from datetime import datetime, timezone
from decimal import Decimal
from typing import Any

from promptcache.ledger.summary_table import prefix_label, unpriced_note
from promptcache.ledger.tracker import parse_since
from promptcache.reports.misses import miss_report, misses_html
from promptcache.reports.time_axis import time_axis_labels

__all__ = ["write_html", "render_html"]

_W, _H = 760, 260  # chart size in px
_PAD_L, _PAD_R, _PAD_T, _PAD_B = 56, 16, 16, 44

_CSS = """
body{font-family:DejaVu Sans,Helvetica,Arial,sans-serif;margin:24px;color:#1d2430;background:#fff}
h1{font-size:22px;margin:0 0 4px} h2{font-size:16px;margin:28px 0 8px}
.sub{color:#5b6575;font-size:13px}
.kpis{display:flex;gap:16px;margin:16px 0;flex-wrap:wrap}
.kpi{border:1px solid #d9dee7;border-radius:6px;padding:10px 14px;min-width:140px}
.kpi b{display:block;font-size:20px} .kpi span{font-size:12px;color:#5b6575}
table{border-collapse:collapse;font-size:12px;margin-top:8px}
td,th{border-bottom:1px solid #e4e8ef;padding:4px 8px;text-align:right}
td:first-child,th:first-child{text-align:left;font-family:DejaVu Sans Mono,monospace}
svg text{font-size:11px;fill:#3b4452} .axis{stroke:#9aa3b2;stroke-width:1}
.grid{stroke:#eef1f5;stroke-width:1} .line{fill:none;stroke:#2f6fde;stroke-width:2}
.pt{fill:#2f6fde} .cost{fill:#e07b39} .base{fill:#c9d3e3} .miss{fill:#c8463d}
.note{font-size:12px;color:#7a4b00;background:#fff6e0;padding:6px 10px;border-radius:4px}
"""


def _esc(x: Any) -> str:
    return html.escape(str(x), quote=True)


def _usd(x: Decimal) -> str:
    return (
        f"${x.quantize(Decimal('0.000001'))}" if abs(x) < 1 else f"${x.quantize(Decimal('0.01'))}"
    )


def _money(row: Any, amount: Decimal) -> str:
    """``n/a`` when no request of ``row`` has a price; ``+`` when some are left out."""
    if row.priced_requests == 0:
        return "n/a"
    return _usd(amount) + ("+" if row.unpriced_requests else "")


def _empty(chart: str, text: str) -> str:
    return (
        f'<svg data-chart="{chart}" width="{_W}" height="60" role="img">'
        f'<text x="10" y="30">{_esc(text)}</text></svg>'
    )


def _hit_rate_chart(rows: list[Any]) -> str:
    pts = [(r.key, r.hit_rate) for r in rows if r.hit_rate is not None]
    if not pts:
        return _empty("hit-rate", "no request reported its cache use in this period")
    iw, ih = _W - _PAD_L - _PAD_R, _H - _PAD_T - _PAD_B
    n = len(pts)
    xs = [_PAD_L + (iw * (i + 0.5) / n) for i in range(n)]
    ys = [_PAD_T + ih * (1 - v) for _, v in pts]
    out = [
        f'<svg data-chart="hit-rate" width="{_W}" height="{_H}" role="img" '
        f'aria-label="cache hit rate over time">'
    ]
    for frac in (0, 0.25, 0.5, 0.75, 1.0):
        y = _PAD_T + ih * (1 - frac)
        out.append(
            f'<line class="grid" x1="{_PAD_L}" x2="{_W - _PAD_R}" y1="{y:.1f}" y2="{y:.1f}"/>'
        )
        out.append(f'<text x="{_PAD_L - 6}" y="{y + 4:.1f}" text-anchor="end">{frac:.0%}</text>')
    out.append(f'<line class="axis" x1="{_PAD_L}" x2="{_PAD_L}" y1="{_PAD_T}" y2="{_PAD_T + ih}"/>')
    out.append(
        f'<line class="axis" x1="{_PAD_L}" x2="{_W - _PAD_R}" y1="{_PAD_T + ih}" '
        f'y2="{_PAD_T + ih}"/>'
    )
    if n > 1:
        poly = " ".join(f"{x:.1f},{y:.1f}" for x, y in zip(xs, ys))
        out.append(f'<polyline class="line" points="{poly}"/>')
    for (key, v), x, y in zip(pts, xs, ys):
        out.append(
            f'<circle class="pt" cx="{x:.1f}" cy="{y:.1f}" r="3.5" data-key="{_esc(key)}" '
            f'data-value="{v:.6f}"><title>{_esc(key)}: {v:.1%}</title></circle>'
        )
    for label in time_axis_labels([str(k) for k, _ in pts], xs, 0.0, float(_W)):
        out.append(
            f'<text class="tick" x="{label.x:.1f}" y="{_PAD_T + ih + 16}" '
            f'text-anchor="middle">{_esc(label.text)}</text>'
        )
        if label.sub is not None:
            out.append(
                f'<text class="tick-day" x="{label.x:.1f}" y="{_PAD_T + ih + 30}" '
                f'text-anchor="middle">{_esc(label.sub)}</text>'
            )
    out.append("</svg>")
    return "".join(out)


def _bar_chart(chart: str, items: list[tuple[str, list[tuple[str, float, str]]]], unit: str) -> str:
    """Horizontal grouped bars: items = [(label, [(css_class, value, text), ...]), ...]."""
    if not items:
        return _empty(chart, "no data in this period")
    vmax = max((v for _, bars in items for _, v, _ in bars), default=0) or 1.0
    per = len(items[0][1])
    bar_h, gap = 14, 10
    lab_w = 150
    h = _PAD_T + len(items) * (per * bar_h + gap) + 24
    iw = _W - lab_w - 300  # room for the value text after the longest bar
    out = [f'<svg data-chart="{chart}" width="{_W}" height="{h}" role="img">']
    y = _PAD_T
    for label, bars in items:
        out.append(
            f'<text x="{lab_w - 6}" y="{y + per * bar_h / 2 + 4:.1f}" text-anchor="end">'
            f"{_esc(label[:22])}</text>"
        )
        for cls, v, txt in bars:
            w = max(0.0, iw * v / vmax)
            out.append(
                f'<rect class="bar {cls}" x="{lab_w}" y="{y}" width="{w:.1f}" '
                f'height="{bar_h - 2}" data-key="{_esc(label)}" data-series="{cls}" '
                f'data-value="{v!r}"><title>{_esc(label)} {cls}: {_esc(txt)}</title></rect>'
            )
            out.append(f'<text x="{lab_w + w + 4:.1f}" y="{y + bar_h - 4}">{_esc(txt)}</text>')
            y += bar_h
        y += gap
    out.append(f'<text x="{lab_w}" y="{h - 6}">{_esc(unit)}</text></svg>')
    return "".join(out)


# Chart buckets (seconds) and the most points a chart draws: the smallest bucket that
# keeps a period within _MAX_POINTS points is used, so a 3-minute run is drawn per 10 s
# and a month per day.
_BUCKETS = (1, 10, 60, 300, 900, 3600, 6 * 3600, 86400, 7 * 86400)
_MAX_POINTS = 48
HIT_MIN_SHARE = 0.5  # a request is a hit when it read at least this share of its prompt


def pick_bucket(span_s: float) -> int:
    """The hit-rate chart's bucket in seconds for a period of ``span_s`` seconds."""
    for b in _BUCKETS:
        if span_s / b < _MAX_POINTS:
            return b
    return _BUCKETS[-1]


def _bucket_name(b: int) -> str:
    for unit, n in (("week", 7 * 86400), ("day", 86400), ("hour", 3600), ("minute", 60)):
        if b % n == 0:
            k = b // n
            return unit if k == 1 else f"{k} {unit}s"
    return "second" if b == 1 else f"{b} seconds"


def _bucket_key(ts: float, b: int) -> str:
    """ISO 8601 UTC label of the bucket starting at ``ts`` (as precise as the bucket)."""
    t = datetime.fromtimestamp(ts, timezone.utc)
    if b >= 86400:
        return t.strftime("%Y-%m-%d")
    if b >= 60:
        return t.strftime("%Y-%m-%dT%H:%MZ")
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


class _Row:
    """A hit-rate chart point: ``key`` (label) and ``hit_rate``."""

    def __init__(self, key: str, hit_rate: float) -> None:
        self.key, self.hit_rate = key, hit_rate


def render_html(
    tracker: Any,
    since: Any = None,
    now: float | None = None,
    *,
    by: str = "model",
    summarize: Any = None,
) -> str:
    """The report page as a string (see the module docstring).

    ``by``: how the cost chart and the table group requests (any ``promptcache report
    --by`` value); ``summarize``: ``summarize(by) -> list[SummaryRow]`` (default
    ``tracker.summary(by=by, since=since)``; ``report --prices`` passes a repriced one).
    """

    now = time.time() if now is None else now
    if summarize is None:

        def summarize(group: str | None) -> list[Any]:
            return list(tracker.summary(by=group, since=since))

    overall = summarize(None)
    total = overall[0] if overall else None
    parts = [
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>",
        "<title>promptcache report</title>",
        f"<style>{_CSS}</style></head><body>",
        "<h1>promptcache report</h1>",
        _subtitle(tracker, parse_since(since, now), by, now),
    ]
    if total is None:
        parts.append("<p>No requests recorded in this period.</p></body></html>")
        return "".join(parts)
    grouped = summarize(by)
    parts += [
        _kpis(total),
        _hit_rate_section(tracker, since),
        _cost_section(grouped, by),
        _prefix_section(tracker, since),
        _group_table(grouped, by),
        misses_html(miss_report(tracker, since=since)),
        "</body></html>",
    ]
    return "".join(parts)


def _subtitle(tracker: Any, lo: float | None, by: str, now: float) -> str:
    period = (
        "all time"
        if lo is None
        else "since " + datetime.fromtimestamp(lo, timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    )
    return (
        f"<div class='sub'>ledger {_esc(tracker.location)} &middot; {period} &middot; "
        f"grouped by {_esc(by)} &middot; generated "
        f"{datetime.fromtimestamp(now, timezone.utc):%Y-%m-%d %H:%M UTC}</div>"
    )


def _kpis(total: Any) -> str:
    """The headline figures, then notes on unreported and unpriced requests."""
    hit = "n/a" if total.hit_rate is None else f"{total.hit_rate:.1%}"
    parts = ["<div class='kpis'>"]
    for label, value in (
        ("requests", f"{total.requests:,}"),
        ("cache hit rate", hit),
        ("cost", _money(total, total.cost)),
        ("without cache", _money(total, total.baseline)),
        ("saving", _money(total, total.saving)),
        ("prompt tokens", f"{total.prompt_tokens:,}"),
    ):
        parts.append(
            f"<div class='kpi' data-kpi='{_esc(label)}'><b>{value}</b><span>{label}</span></div>"
        )
    parts.append("</div>")
    if total.unreported_requests:
        parts.append(
            f"<p class='note'>{total.unreported_requests} request(s) came from servers "
            "that did not report cached tokens; their hit rate is unknown and left out "
            "of the rates (it is not counted as a miss).</p>"
        )
    if total.unpriced_requests:
        parts.append(f"<p class='note'>{_esc(unpriced_note(total.unpriced_requests))}</p>")
    return "".join(parts)


def _hit_rate_section(tracker: Any, since: Any) -> str:
    span = tracker.time_span(since=since)
    bucket = pick_bucket(0.0 if span is None else span[1] - span[0])
    series = [
        _Row(_bucket_key(ts, bucket), read / prompt)
        for ts, read, prompt in tracker.hit_series(bucket, since=since)
        if prompt
    ]
    return (
        f"<h2>Cache hit rate per {_bucket_name(bucket)} (token-weighted: cache-read "
        "tokens / prompt tokens)</h2>" + _hit_rate_chart(series)
    )


def _cost_section(grouped: list[Any], by: str) -> str:
    items = [
        (
            r.key or "(none)",
            [
                ("cost", float(r.cost), _money(r, r.cost)),
                (
                    "base",
                    float(r.baseline),
                    f"{_money(r, r.baseline)} without cache, saving {_money(r, r.saving)}",
                ),
            ],
        )
        for r in grouped
    ]
    return f"<h2>Cost and saving by {_esc(by)}</h2>" + _bar_chart(
        "cost-by-group", items, "USD: orange = cost, grey = no-cache baseline"
    )


def _prefix_section(tracker: Any, since: Any) -> str:
    """The ten prefixes that missed the most prompt tokens, with their non-hit requests."""
    by_prefix = [r for r in tracker.summary(by="prefix_hash", since=since) if r.key]
    hits = tracker.hit_counts("prefix_hash", HIT_MIN_SHARE, since=since) if by_prefix else {}

    def missed(r: Any) -> int:
        return int(r.prompt_tokens - r.cache_read_tokens)

    by_prefix.sort(key=lambda r: (-missed(r), -r.requests))
    items = []
    for r in by_prefix[:10]:
        h, n = hits.get(r.key, (0, 0))
        items.append(
            (
                prefix_label(r.key),
                [
                    (
                        "miss",
                        float(missed(r)),
                        f"{missed(r):,} tokens missed, {n - h}/{n} requests not a hit",
                    )
                ],
            )
        )
    return (
        "<h2>Top prefixes by missed prompt tokens</h2>"
        f"<p class='sub'>A request counts as a hit when it read at least "
        f"{HIT_MIN_SHARE:.0%} of its prompt tokens from the cache (a request that reused "
        "only the chat template's first block is a miss). Prefixes are labelled by the "
        "first 16 hex digits of their id.</p>"
        + _bar_chart("prefix-misses", items, "prompt tokens not read from the cache")
    )


def _group_table(grouped: list[Any], by: str) -> str:
    head = _esc(by)
    parts = [
        f"<h2>By {head}</h2><table><tr><th>{head}</th><th>requests</th><th>prompt tokens"
        "</th><th>cache read</th><th>cache write</th><th>hit rate</th><th>cost</th>"
        "<th>no-cache</th><th>saving</th></tr>"
    ]
    for r in grouped:
        key = prefix_label(r.key) if by == "prefix_hash" else (r.key or "-")
        parts.append(
            f"<tr><td>{_esc(key)}</td><td>{r.requests:,}</td><td>{r.prompt_tokens:,}</td>"
            f"<td>{r.cache_read_tokens:,}</td><td>{r.cache_write_tokens:,}</td>"
            f"<td>{'n/a' if r.hit_rate is None else f'{r.hit_rate:.1%}'}</td>"
            f"<td>{_money(r, r.cost)}</td><td>{_money(r, r.baseline)}</td>"
            f"<td>{_money(r, r.saving)}</td></tr>"
        )
    parts.append("</table>")
    return "".join(parts)


def write_html(
    tracker: Any,
    path: str | os.PathLike[str],
    since: Any = None,
    *,
    by: str = "model",
    summarize: Any = None,
) -> str:
    """Write the report page to ``path`` (atomically: a temp file then rename) and return
    the path; ``by``/``summarize`` as in :func:`render_html`. Raises ``OSError`` when it
    cannot be written."""
    text = render_html(tracker, since=since, by=by, summarize=summarize)
    path = os.fspath(path)
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)
    return path
