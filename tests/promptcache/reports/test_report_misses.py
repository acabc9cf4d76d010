"""``promptcache report``: misses by cause in the table, JSON and HTML (rendered in headless
chromium), the top offenders with their paths, and the CI guards' exit codes."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from promptcache import Tracker, Usage

ROOT = Path(__file__).resolve().parents[3]
ARTIFACTS = ROOT / "artifacts"
MODEL = "claude-sonnet-4-5"
SYSTEM = "You are a meticulous travel planner; answer in metric units. " * 80


def body(turns: int, *, stamp: str | None = None, extra_tool: bool = False) -> dict:
    tools = [{"name": "weather", "description": "Weather.", "input_schema": {"type": "object"}}]
    if extra_tool:
        tools.append({"name": "news", "description": "News.", "input_schema": {"type": "object"}})
    msgs: list[dict] = [{"role": "user", "content": [{"type": "text", "text": "q0"}]}]
    for i in range(turns):
        msgs += [
            {"role": "assistant", "content": f"a{i}"},
            {"role": "user", "content": [{"type": "text", "text": f"q{i + 1}"}]},
        ]
    msgs[-1]["content"][0]["cache_control"] = {"type": "ephemeral"}
    text = (f"Current time: {stamp}. " if stamp else "") + SYSTEM
    return {
        "model": MODEL,
        "tools": tools,
        "system": [{"type": "text", "text": text}],
        "messages": msgs,
    }


def u(uncached: int, read: int, write: int) -> Usage:
    return Usage(
        uncached_input_tokens=uncached,
        cache_read_tokens=read,
        cache_write_tokens=write,
        cache_write_by_ttl={"5m": write} if write else {},
        provider="anthropic",
        model=MODEL,
    )


def ledger(path: str) -> None:
    t = Tracker(path)
    t0 = 1_800_000_000.0
    t.record(u(3, 0, 1500), request=body(0), api="messages", ts=t0)  # cold: 1,503 missed
    t.record(u(3, 1500, 20), request=body(1), api="messages", ts=t0 + 10)  # hit: 23
    t.record(u(3, 0, 1560), request=body(2, extra_tool=True), api="messages", ts=t0 + 20)
    t.record(u(3, 1560, 20), request=body(3, extra_tool=True), api="messages", ts=t0 + 30)
    t.record(
        u(3, 0, 1600), request=body(4, stamp="09:14", extra_tool=True), api="messages", ts=t0 + 40
    )
    t.record(
        u(3, 0, 1620), request=body(5, stamp="09:14", extra_tool=True), api="messages", ts=t0 + 400
    )
    t.close()


# by hand: prompt tokens 1503 + 1523 + 1563 + 1583 + 1603 + 1623 = 9,398, read 3,060
HIT_RATE = 3060 / 9398
MISSED = {"cold": 1503, "prefix_changed": 1563 + 1603, "ttl_expired": 1623}


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "promptcache.cli", "report", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=120,
    )


@pytest.fixture(scope="module")
def db(tmp_path_factory) -> str:
    path = str(tmp_path_factory.mktemp("misses") / "l.db")
    ledger(path)
    return path


def test_table_shows_causes_and_offenders_with_paths(db) -> None:
    r = cli("--db", db)
    assert r.returncode == 0, r.stderr
    text = r.stdout
    section = text[text.index("misses by cause") :]
    lines = section.splitlines()
    # 6 attributed: 2 hits, and 4 misses (1 cold, 2 prefix_changed, 1 ttl_expired)
    assert lines[0] == "misses by cause (6 attributed request(s): 2 hit, 4 missed)"
    table = lines[3 : lines.index("top offenders") - 1]  # up to the blank line before it
    rows = {line.split()[0]: line.split()[1:] for line in table}
    assert rows == {
        "cold": ["1", "1,503", "1,503"],
        "prefix_changed": ["2", "3,166", "3,166"],
        "ttl_expired": ["1", "1,623", "1,623"],
    }  # no "hit" row under "misses by cause" (issues 29 and 31)
    offenders = text[text.index("top offenders") :]
    assert re.search(
        r"prefix_changed\s+1\s+1,603\s+claude-sonnet-4-5\s+\$\.system\[0\]\.text", offenders
    )
    assert re.search(r"prefix_changed\s+1\s+1,563\s+claude-sonnet-4-5\s+\$\.tools\[1\]", offenders)


def test_json_has_the_misses(db) -> None:
    r = cli("--db", db, "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)["misses"]
    assert doc["attributed_requests"] == 6
    got = {c["cause"]: c["missed_tokens"] for c in doc["by_cause"]}
    assert got == MISSED  # the miss causes only
    assert doc["hits"] == {
        "cause": "hit",
        "requests": 2,
        "prompt_tokens": 3106,
        "missed_tokens": 46,
    }
    paths = [o["path"] for o in doc["top_offenders"]]
    assert paths[:2] == ["$.system[0].text", "$.tools[1]"] or "$.tools[1]" in paths


def test_ci_guards_exit_1_and_bad_values_exit_2(db) -> None:
    assert cli("--db", db, "--fail-under-hit-rate", f"{HIT_RATE - 0.001:.4f}").returncode == 0
    r = cli("--db", db, "--fail-under-hit-rate", "0.8")
    assert r.returncode == 1
    assert f"hit rate {HIT_RATE:.1%} is under the required 80.0%" in r.stderr
    r = cli("--db", db, "--fail-on", "prefix_changed")
    assert r.returncode == 1
    assert "2 request(s) missed with prefix_changed at $.system[0].text, $.tools[1]" in r.stderr
    assert cli("--db", db, "--fail-on", "below_minimum,no_breakpoint").returncode == 0
    for bad in (("--fail-on", "slow"), ("--fail-under-hit-rate", "80")):
        r = cli("--db", db, *bad)
        assert r.returncode == 2 and len(r.stderr.strip().splitlines()) >= 1


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (.ci/services.sh)")
def test_html_misses_section_in_headless_chromium(db, tmp_path) -> None:
    page = tmp_path / "report.html"
    r = cli("--db", db, "--html", str(page))
    assert r.returncode == 0, r.stderr
    flags = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--no-first-run",
        "--hide-scrollbars",
        f"--user-data-dir={tmp_path / 'profile'}",
    ]
    dom = subprocess.run(
        [CHROMIUM, *flags, "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=120
    )
    assert dom.returncode == 0, dom.stderr[-2000:]
    html = dom.stdout
    chart = html[html.index('data-chart="miss-causes"') :]
    chart = chart[: chart.index("</svg>")]
    bars = re.findall(r'width="([\d.]+)"[^>]*data-key="([^"]+)"[^>]*data-value="([^"]+)"', chart)
    assert {k: int(v) for _, k, v in bars} == MISSED
    widths = {k: float(w) for w, k, _ in bars}
    assert widths["prefix_changed"] == max(widths.values()) > widths["cold"] > 0
    table = html[html.index('data-table="miss-offenders"') :]
    assert "$.system[0].text" in table and "$.tools[1]" in table
    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / "report_misses.png"
    r = subprocess.run(
        [CHROMIUM, *flags, f"--screenshot={shot}", "--window-size=900,2600", page.as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0 and shot.exists() and shot.stat().st_size > 10_000, r.stderr[-2000:]
