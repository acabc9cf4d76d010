"""The HTML report's hit-rate chart: time labels thinned to fit (issue 31), worked by hand, then
rendered in headless chromium at 20 and 10,000 records: the labels' boxes as chromium lays them
out do not overlap, and in a screenshot each label is a separate run of ink."""

from __future__ import annotations

import html
import json
import re
import subprocess
import sys
from datetime import datetime, timezone

import pytest

from promptcache import Price, Tracker, Usage
from promptcache.reports.time_axis import time_axis_labels

from .test_report import ARTIFACTS, CHROMIUM, _png_pixels

# the chart's geometry (promptcache/reports/html.py): 760 px wide, plot from x=56 to 744
W, PAD_L, PAD_R = 760, 56, 16
IW = W - PAD_L - PAD_R  # 688


def _xs(n: int) -> list[float]:
    return [PAD_L + IW * (i + 0.5) / n for i in range(n)]


def test_twenty_one_second_buckets():
    keys = [f"2026-11-27T09:00:{s:02d}Z" for s in range(20)]
    labels = time_axis_labels(keys, _xs(20), 0, W)
    # "09:00:00" is 8 characters <= 8 * 11 px * 1303/2048 = 55.99 px; + 12 px gap = 67.99 px;
    # the points are 688 / 20 = 34.4 px apart, so every 2nd point: 0, 2, ..., 18
    assert [lab.index for lab in labels] == list(range(0, 20, 2))
    assert [lab.text for lab in labels] == [f"09:00:{s:02d}" for s in range(0, 20, 2)]
    assert [lab.sub for lab in labels] == ["11-27"] + [None] * 9  # the day once
    assert labels[0].x == pytest.approx(56 + 34.4 * 0.5)


def test_five_minute_buckets_across_midnight_and_day_buckets():
    keys = [f"2026-11-27T23:{m:02d}Z" for m in range(0, 60, 5)]
    keys += [f"2026-11-28T00:{m:02d}Z" for m in range(0, 60, 5)]  # 24 points
    labels = time_axis_labels(keys, _xs(24), 0, W)
    # "23:00": 5 chars -> 34.99 px + 12 = 46.99 px; points 688 / 24 = 28.67 px apart -> stride 2
    assert [lab.index for lab in labels] == list(range(0, 24, 2))
    assert labels[6].text == "00:00" and labels[6].sub == "11-28"  # the day changes here
    assert [lab.sub for lab in labels].count(None) == 10
    days = [f"2026-11-{d:02d}" for d in range(1, 31)]
    labels = time_axis_labels(days, _xs(30), 0, W)
    # "11-01": 34.99 + 12 px; 688 / 30 = 22.93 px apart -> stride 3
    assert [lab.text for lab in labels][:3] == ["11-01", "11-04", "11-07"]
    assert labels[0].sub == "2026" and labels[1].sub is None


def test_a_label_crossing_the_edge_is_left_out():
    # centred at 20 px, the 55.99 px wide "09:00:00" would start at -8 px
    assert time_axis_labels(["2026-11-27T09:00:00Z"], [20.0], 0, W) == []
    (label,) = time_axis_labels(["2026-11-27T09:00:00Z"], [40.0], 0, W)
    assert (label.text, label.sub) == ("09:00:00", "11-27")


def _ledger(path, n: int, spacing_s: float, t0: float) -> None:
    t = Tracker(path)
    price = Price(input="1", output="4", cache_read="0.1")
    for i in range(n):
        u = Usage(uncached_input_tokens=100, cache_read_tokens=(i % 7) * 100, output_tokens=5)
        t.record(u, model="m", price=price, ts=t0 + i * spacing_s)
    t.close()


# Reads where chromium laid out the hit-rate chart and its time labels (CSS px), into the title.
_MEASURE = """<script>
const svg = document.querySelector('svg[data-chart="hit-rate"]');
const r = svg.getBoundingClientRect();
const ticks = [...svg.querySelectorAll('text.tick')].map(t => {
  const b = t.getBoundingClientRect(); return [b.left, b.right, b.top, b.bottom, t.textContent];
});
document.title = JSON.stringify({svg: [r.left, r.right, r.top, r.bottom], ticks: ticks});
</script>"""

FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--no-first-run",
    "--hide-scrollbars",
    "--force-device-scale-factor=1",
    "--window-size=900,1400",  # the same layout for the measuring run and the screenshot
]


def _ink_runs(row_pixels, bpp: int, x0: int, x1: int, min_gap: int = 4) -> list[tuple[int, int]]:
    """Runs of columns in [x0, x1) holding a dark pixel in any of ``row_pixels``, split where
    at least ``min_gap`` columns are blank."""
    ink = [
        any(min(line[x * bpp : x * bpp + 3]) < 170 for line in row_pixels) for x in range(x0, x1)
    ]
    runs: list[list[int]] = []
    blank = min_gap
    for i, dark in enumerate(ink):
        if dark:
            if blank >= min_gap:
                runs.append([x0 + i, x0 + i])
            runs[-1][1] = x0 + i
            blank = 0
        else:
            blank += 1
    return [(a, b) for a, b in runs]


@pytest.mark.skipif(
    CHROMIUM is None,
    reason="chromium is not installed; .ci/services.sh installs Debian's chromium package",
)
@pytest.mark.parametrize(
    "n, spacing_s, expected_labels",
    [
        # 20 records 1 s apart: 1 s buckets, 20 points, every 2nd labelled (worked above)
        (20, 1.0, 10),
        # 10,000 records 1.4 s apart span 13,998.6 s: 5-minute buckets (13,998.6 / 300 < 48),
        # 47 points 14.64 px apart; "09:00" needs 46.99 px -> every 4th: 0, 4, ..., 44
        (10_000, 1.4, 12),
    ],
)
def test_time_labels_fit_in_chromium(tmp_path, n, spacing_s, expected_labels):
    t0 = datetime(2026, 11, 27, 9, 0, tzinfo=timezone.utc).timestamp()
    db, page = tmp_path / "l.db", tmp_path / "report.html"
    _ledger(str(db), n, spacing_s, t0)
    r = subprocess.run(
        [sys.executable, "-m", "promptcache", "report", "--db", str(db), "--html", str(page)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    text = page.read_text()
    chart = re.search(r'<svg data-chart="hit-rate".*?</svg>', text, re.S).group(0)
    assert len(re.findall(r'class="tick"', chart)) == expected_labels
    measured = tmp_path / "measure.html"
    measured.write_text(text.replace("</body>", _MEASURE + "</body>"))
    profile = f"--user-data-dir={tmp_path / 'profile'}"
    dom = subprocess.run(
        [CHROMIUM, *FLAGS, profile, "--dump-dom", measured.as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert dom.returncode == 0, dom.stderr[-2000:]
    title = re.search(r"<title>(.*?)</title>", dom.stdout, re.S).group(1)
    box = json.loads(html.unescape(title))
    ticks = sorted(box["ticks"])
    assert len(ticks) == expected_labels
    left, right, _, bottom = box["svg"]
    for a, b in zip(ticks, ticks[1:]):
        assert a[1] + 2 <= b[0], f"labels {a[4]!r} and {b[4]!r} overlap: {a[:2]} {b[:2]}"
    assert all(left <= t[0] and t[1] <= right for t in ticks)

    # the screenshot: in the strip the labels occupy, each label is its own run of ink
    assert bottom < 1400  # the chart is on the first screen
    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / f"report-time-axis-{n}.png"
    shot.unlink(missing_ok=True)
    r = subprocess.run(
        [
            CHROMIUM,
            *FLAGS,
            profile,
            f"--screenshot={shot}",
            page.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0 and shot.exists(), r.stderr[-2000:]
    w, h, bpp, rows = _png_pixels(shot)
    y0, y1 = int(min(t[2] for t in ticks)), int(max(t[3] for t in ticks)) + 1
    runs = _ink_runs(rows[y0:y1], bpp, int(left), int(right))
    assert len(runs) == expected_labels, runs
    for (a, b), tick in zip(runs, ticks):
        assert tick[0] - 1 <= a and b <= tick[1] + 1, (a, b, tick)
