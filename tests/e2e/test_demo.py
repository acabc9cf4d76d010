"""``promptcache demo`` end to end (a small run: 3 requests each way, 2 output tokens)."""

from __future__ import annotations

import re
import subprocess
import sys

from promptcache import Tracker


def test_demo_prints_the_table_and_records_both_runs(tmp_path):
    db = tmp_path / "demo.db"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "promptcache",
            "demo",
            "--requests",
            "3",
            "--max-tokens",
            "2",
            "--db",
            str(db),
        ],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = proc.stdout
    # Per-request progress lines: prompt and cached tokens for each run.
    per = {
        run: [
            tuple(map(int, m))
            for m in re.findall(rf"\[{run}\s+\d+/3\] prompt\s+(\d+) tok, cached\s+(\d+)", out)
        ]
        for run in ("naive", "built")
    }
    assert len(per["naive"]) == 3 and len(per["built"]) == 3
    # Naive: a fresh timestamp at the very top, so at most the chat template's first block
    # (the "<|im_start|>system\nCurrent time: 2026-" part) can ever match.
    assert all(c <= 16 for _, c in per["naive"])
    # Built: the frozen system prompt and tools are reused by requests 2 and 3.
    (_, b1), (p2, b2), (p3, b3) = per["built"]
    assert b1 == 0 or b1 <= 16
    assert b2 > 0.85 * p2 and b3 > 0.85 * p3
    # The table's hit rates are sum(cached) / sum(prompt) of those lines.
    m = re.search(r"hit rate\s+([0-9.]+)\s+([0-9.]+)", out)
    naive_rate, built_rate = float(m.group(1)), float(m.group(2))
    for rate, rows in ((naive_rate, per["naive"]), (built_rate, per["built"])):
        assert abs(rate - sum(c for _, c in rows) / sum(p for p, _ in rows)) < 0.006
    assert "median TTFT" in out
    # Both runs are in the ledger, told apart by their metadata.
    tracker = Tracker(db)
    assert tracker.count() == 6
    by_run = {}
    for rec in tracker.records():
        by_run.setdefault(rec.metadata["demo_run"], []).append(rec)
    assert sorted(by_run) == ["built", "naive"]
    assert sum(r.usage.cache_read_tokens for r in by_run["built"]) == b1 + b2 + b3
