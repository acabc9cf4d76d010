"""Time-axis labels of the report's charts: short, and thinned so that no two overlap.

A point's key is the ISO 8601 UTC start of its bucket as :mod:`promptcache.reports.html` writes
it: ``2026-11-27`` (day buckets), ``2026-11-27T09:00Z`` (minutes), ``2026-11-27T09:00:10Z``
(seconds). Its label is the time of day (``09:00``, ``09:00:10``; for a day bucket the month
and day, ``11-27``), with a second line naming the day (``11-27``; for day buckets the year)
under the first label and wherever it changes from the previous label.

Labels are drawn at :data:`FONT_PX` in DejaVu Sans, the page's first font; the widest character
they hold is a digit, which advances 1303/2048 em in DejaVu Sans (its ``hmtx`` table, version
2.37; Helvetica's and Arial's digits are narrower, 0.556 em), so ``len(text) * CHAR_EM *
FONT_PX`` bounds a label's width. The points keep every ``k``-th label from the first, ``k`` the
smallest stride whose spacing holds the widest label plus :data:`GAP_PX`; a label whose box
would cross the chart's edges is left out.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["AxisLabel", "FONT_PX", "CHAR_EM", "GAP_PX", "label_width", "time_axis_labels"]

FONT_PX = 11  # the CSS of svg text in promptcache.reports.html
CHAR_EM = 1303 / 2048  # DejaVu Sans digit advance (hmtx), the widest character of a label
GAP_PX = 12  # the least blank space between two labels


@dataclass(frozen=True)
class AxisLabel:
    """One label: the point's ``index``, its centre ``x`` (px), the first line ``text`` and the
    second line ``sub`` (the day, or None when it is the previous label's)."""

    index: int
    x: float
    text: str
    sub: str | None


def _parts(key: str) -> tuple[str, str]:
    """(first line, second line) of a bucket key: (time, MM-DD) or, for a day, (MM-DD, YYYY)."""
    day, _, clock = key.partition("T")
    clock = clock.rstrip("Z")
    return (clock, day[5:]) if clock else (day[5:], day[:4])


def label_width(text: str) -> float:
    """An upper bound of ``text``'s width in px at :data:`FONT_PX` (see the module docstring)."""
    return len(text) * CHAR_EM * FONT_PX


def time_axis_labels(
    keys: Sequence[str], xs: Sequence[float], left: float, right: float
) -> list[AxisLabel]:
    """The labels to draw under points with bucket ``keys`` at centres ``xs`` (px, ascending,
    evenly spaced), none overlapping another and each inside ``[left, right]`` (px).

    Raises:
        ValueError: ``keys`` and ``xs`` differ in length.
    """
    if len(keys) != len(xs):
        raise ValueError(f"{len(keys)} keys for {len(xs)} points")
    if not keys:
        return []
    parts = [_parts(k) for k in keys]
    widest = max(label_width(max(a, b, key=len)) for a, b in parts)
    spacing = (xs[-1] - xs[0]) / (len(xs) - 1) if len(xs) > 1 else math.inf
    stride = max(1, math.ceil((widest + GAP_PX) / spacing))
    out: list[AxisLabel] = []
    previous_day: str | None = None
    for i in range(0, len(keys), stride):
        text, day = parts[i]
        half = label_width(max(text, day, key=len)) / 2
        if xs[i] - half < left or xs[i] + half > right:
            continue
        out.append(AxisLabel(i, xs[i], text, day if day != previous_day else None))
        previous_day = day
    return out
