"""The live view in headless chromium: the proxy's /_promptcache/ page and
``promptcache report --serve``. Numbers read back from the DOM equal the ledger's own sums;
axis labels fit and do not overlap at 20 and at 10,000 calls; screenshots are saved under
artifacts/ and checked for the charts' colours."""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import socket
import subprocess
import sys
import time
from decimal import Decimal
from pathlib import Path

import httpx
import openai
import pytest

from promptcache import Tracker, Usage
from promptcache.ledger.pricing import price_for
from promptcache.misses.attribution import Attributed
from promptcache.misses.cause import MISS_CAUSES, Attribution
from promptcache.misses.digest_chain import DigestChain
from promptcache.proxy.server import ProxyServer, free_port
from promptcache.proxy.upstreams import resolve

ROOT = Path(__file__).resolve().parents[3]
ARTIFACTS = ROOT / "artifacts"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(
    CHROMIUM is None,
    reason="chromium is not installed; .ci/services.sh installs Debian's chromium package",
)

_spec = importlib.util.spec_from_file_location(
    "report_png", ROOT / "tests/promptcache/reports/test_report.py"
)
assert _spec is not None and _spec.loader is not None
_png = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_png)


def chromium(url: str, tmp_path: Path, *, shot: Path | None = None, size: str = "1000,1500") -> str:
    flags = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--no-first-run",
        "--hide-scrollbars",
        f"--user-data-dir={tmp_path / 'profile'}",
        "--virtual-time-budget=8000",
    ]
    what = [f"--screenshot={shot}", f"--window-size={size}"] if shot else ["--dump-dom"]
    r = subprocess.run([CHROMIUM, *flags, *what, url], capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stderr[-2000:]
    return r.stdout


def kpis(dom: str) -> dict[str, str]:
    return dict(re.findall(r'data-kpi="(\w+)" data-value="([^"]*)"', dom))


def chart_attrs(dom: str, chart: str) -> dict[str, str]:
    tag = re.search(rf'<svg[^>]*data-chart="{chart}"[^>]*>', dom)
    assert tag, chart
    return dict(re.findall(r'(data-[\w-]+)="([^"]*)"', tag.group(0)))


def assert_equals_ledger(dom: str, db: str) -> None:
    t = Tracker(db)
    total = t.summary(by=None).total
    assert total is not None
    k = kpis(dom)
    assert int(k["requests"]) == total.requests
    assert float(k["hit_rate"]) == pytest.approx(total.hit_rate, abs=1e-12)
    assert Decimal(k["cost"]) == total.cost and Decimal(k["saving"]) == total.saving
    want: dict[str, tuple[int, int]] = {}
    for g in t.miss_groups():
        if g["cause"] in MISS_CAUSES:
            n, m = want.get(g["cause"], (0, 0))
            want[g["cause"]] = (n + g["requests"], m + g["missed_tokens"])
    got = {
        c: (int(n), int(m))
        for c, n, m in re.findall(
            r'data-cause="(\w+)" data-requests="(\d+)" data-missed="(\d+)"', dom
        )
    }
    assert got == want and "hit" not in got
    assert int(k["misses"]) == sum(n for n, _ in want.values())


def assert_readable_axes(dom: str) -> None:
    for chart in ("hit-rate", "cost"):
        a = chart_attrs(dom, chart)
        assert a["data-overlaps"] == "0", (chart, a)
        assert 2 <= int(a["data-xlabels"]) <= 7, (chart, a)
    assert "font-size:12px" in dom.replace(" ", "")  # svg text at 12 px


def test_proxy_live_view_follows_the_ledger(upstream, tmp_path):
    db = str(tmp_path / "l.db")
    sysm = "You summarise contracts. " * 600
    with ProxyServer(resolve(upstream.url), db, port=0) as p:
        oc = openai.OpenAI(base_url=p.url + "/v1", api_key="k")
        for i in range(20):  # 20 calls; the system prompt changes at call 10
            msgs = [
                {"role": "system", "content": sysm + ("(v2)" if i >= 10 else "")},
                {"role": "user", "content": f"question {i}"},
            ]
            read = 0 if i in (0, 10) else 3968
            oc.chat.completions.create(
                model="gpt-4o",
                messages=msgs,
                extra_headers={"x-test-usage": json.dumps({"prompt": 4000, "cached": read})},
            )
            time.sleep(0.1)  # spread over ~2 s: several buckets, several axis labels
        deadline = time.monotonic() + 10
        while p.ledger.stats.written < 20 and time.monotonic() < deadline:
            time.sleep(0.02)
        dom = chromium(p.live_url, tmp_path)
        assert 'data-ready="1"' in dom and 'data-requests="20"' in dom
        assert_equals_ledger(dom, db)
        assert_readable_axes(dom)
        # the ledger says the two misses: call 0 cold, call 10 prefix_changed at the system
        recs = Tracker(db).records()
        changed = [r for r in recs if r.miss_cause == "prefix_changed"]
        assert [r.miss_path for r in changed] == ["$.messages[0].content"]
        assert [r.miss_cause for r in recs].count("cold") == 1
        # drill-down of the changed call: path, tokens lost and the cost of the miss
        miss = changed[0]
        dom = chromium(p.live_url + f"#call={miss.record_id}", tmp_path)
        box = re.search(r'<div id="detail"[^>]*>', dom).group(0)
        attrs = dict(re.findall(r'(data-[\w-]+)="([^"]*)"', box))
        assert attrs["data-path"] == "$.messages[0].content"
        assert int(attrs["data-missed"]) == 4000  # read nothing of 4,000 prompt tokens
        gpt4o = price_for("gpt-4o")
        lost = Decimal(4000) * (gpt4o.input - gpt4o.cache_read) / Decimal(1_000_000)
        assert Decimal(attrs["data-miss-cost"]) == lost
        ARTIFACTS.mkdir(exist_ok=True)
        shot = ARTIFACTS / "live_view_proxy.png"
        chromium(p.live_url + f"#call={miss.record_id}", tmp_path, shot=shot)
    w, h, bpp, rows = _png._png_pixels(shot)
    assert (w, h) == (1000, 1500)
    assert _png._count_color(rows, bpp, (0xE0, 0x7B, 0x39)) > 200  # cost bars
    assert _png._count_color(rows, bpp, (0x2F, 0x6F, 0xDE)) > 100  # hit-rate line


def _wait_port(port: int, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise AssertionError("report --serve did not start")


def _big_ledger(db: str, n: int = 10_000) -> None:
    t0 = 1_796_000_000.0  # 2026-11-30
    items = []
    for i in range(n):
        ts = t0 + i * 26.0  # 10,000 calls over three days
        if i % 50 == 0:
            cause, path, read = "prefix_changed", "$.system[0].text", 0
        elif i % 97 == 0:
            cause, path, read = "ttl_expired", None, 0
        else:
            cause, path, read = "hit", None, 3000
        u = Usage(
            uncached_input_tokens=3200 - read,
            cache_read_tokens=read,
            cache_write_tokens=0,
            output_tokens=50,
            provider="anthropic",
            model="claude-sonnet-4-5",
        )
        a = Attributed(Attribution(cause, path=path), DigestChain("messages", ()), f"s{i // 100}")
        items.append((u, dict(ts=ts, api="messages", attributed=a, record_id=f"r{i:05d}")))
    with Tracker(db) as t:
        t.record_many(items)


@pytest.mark.slow
def test_report_serve_at_10000_calls(tmp_path):
    db = str(tmp_path / "big.db")
    _big_ledger(db)
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "promptcache", "report", "--serve", "--db", db, "--port", str(port)],
        cwd=ROOT,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _wait_port(port, proc)
        url = f"http://127.0.0.1:{port}/"
        assert httpx.get(url + "api/state", timeout=60).status_code == 200  # warm the cache
        dom = chromium(url, tmp_path)
        assert 'data-requests="10000"' in dom
        assert_equals_ledger(dom, db)
        assert_readable_axes(dom)
        assert int(chart_attrs(dom, "hit-rate")["data-points"]) <= 60
        ARTIFACTS.mkdir(exist_ok=True)
        shot = ARTIFACTS / "live_view_10000.png"
        chromium(url, tmp_path, shot=shot)
        w, h, bpp, rows = _png._png_pixels(shot)
        assert _png._count_color(rows, bpp, (0xE0, 0x7B, 0x39)) > 200
    finally:
        proc.terminate()
        proc.wait(10)


def test_report_serve_without_the_extra_is_one_line(monkeypatch, capsys, tmp_path):
    from promptcache.cli import main

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda n, *a: None if n == "starlette" else real(n, *a)
    )
    assert main(["report", "--serve", "--db", str(tmp_path / "l.db")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "promptcache report: the live view needs the proxy extra: pip install 'promptcache[proxy]'"
    ]
