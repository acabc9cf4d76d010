"""``promptcache report``: terminal table, JSON, and the HTML page in headless chromium."""

from __future__ import annotations

import json
import os
import re
import shutil
import struct
import subprocess
import sys
import zlib
from datetime import datetime, timezone
from decimal import Decimal as D
from pathlib import Path

import pytest

from promptcache import Price, Tracker, Usage

ROOT = Path(__file__).resolve().parents[3]
ARTIFACTS = ROOT / "artifacts"
PRICE = Price(input="3", output="15", cache_read="0.30", cache_write_5m="3.75", cache_write_1h="6")
T0 = datetime(2026, 11, 27, 9, 0, tzinfo=timezone.utc).timestamp()


def _ledger(path) -> Tracker:
    """Two models, three hours, two prefixes, one server that does not report caching."""
    t = Tracker(path)
    for h in range(3):
        for i in range(4):
            # model-a, prefix P1: hour 0 misses (write 1000 at 5m), hours 1-2 hit 1000
            if h == 0:
                u = Usage(
                    uncached_input_tokens=100,
                    cache_write_tokens=1000,
                    cache_write_by_ttl={"5m": 1000},
                    output_tokens=10,
                )
            else:
                u = Usage(uncached_input_tokens=100, cache_read_tokens=1000, output_tokens=10)
            t.record(
                u,
                model="model-a",
                provider="anthropic",
                price=PRICE,
                prefix_hash="a" * 64,
                ts=T0 + h * 3600 + i,
            )
    # model-b, prefix P2: always misses, 2000 uncached tokens, 3 requests
    for i in range(3):
        t.record(
            Usage(uncached_input_tokens=2000, output_tokens=5),
            model="model-b",
            provider="openai",
            price=Price(input="1", output="4", cache_read="0.1"),
            prefix_hash="b" * 64,
            ts=T0 + 7200 + 10 + i,
        )
    # a local server that did not report caching
    t.record(
        Usage(uncached_input_tokens=500, output_tokens=1, cache_reported=False),
        model="smol",
        provider="local",
        ts=T0 + 7300,
    )
    return t


def _cli(*args: str, env_db: str | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    if env_db:
        env["PROMPTCACHE_LEDGER"] = env_db
    return subprocess.run(
        [sys.executable, "-m", "promptcache.cli", "report", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=120,
    )


def test_terminal_and_json_report(tmp_path):
    db = str(tmp_path / "l.db")
    _ledger(db).close()
    r = _cli("--db", db, "--by", "model")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    row_a = next(line for line in lines if line.startswith("model-a"))
    # model-a: 12 requests; prompt = 12*100 + 4*1000 (writes) + 8*1000 (reads) = 13,200
    # hit rate = 8000 / 13200 = 60.6%
    # cost: writes 4*(100*3 + 1000*3.75 + 10*15) = 4*4200 = 16,800 micro-$
    #       hits   8*(100*3 + 1000*0.30 + 10*15) = 8*750  =  6,000 micro-$ -> $0.0228
    # no cache: 12*(1100*3 + 150) = 12*3450 = 41,400 micro-$ -> $0.0414; saving $0.0186
    assert row_a.split()[1:3] == ["12", "13,200"]
    assert "60.6%" in row_a and "$0.0228" in row_a and "$0.0414" in row_a and "$0.0186" in row_a
    assert "did not report cached tokens" in r.stdout  # the smol request: unknown, not a miss
    j = json.loads(_cli("--db", db, "--json", "--by", "prefix_hash").stdout)
    rows = {x["key"]: x for x in j["rows"]}
    assert rows["b" * 64]["misses"] == 3 and rows["b" * 64]["hit_rate"] == 0.0
    # total: 12 + 3 + 1 requests; cost 0.0228 + 3*(2000*1 + 5*4)=6060 micro -> 0.028860
    assert j["total"]["requests"] == 16 and D(j["total"]["cost"]) == D("0.02886")
    # --since keeps only the last hour's requests (T0+2h onwards = 4 + 3 + 1)
    since = datetime.fromtimestamp(T0 + 7200, timezone.utc).isoformat()
    j2 = json.loads(_cli("--db", db, "--json", "--since", since).stdout)
    assert j2["total"]["requests"] == 8


def test_report_bad_input_exits_2_with_one_line(tmp_path):
    r = _cli("--db", str(tmp_path / "missing.db"))
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "no ledger" in r.stderr
    db = str(tmp_path / "l.db")
    _ledger(db).close()
    r = _cli("--db", db, "--since", "soon")
    assert r.returncode == 2 and "duration" in r.stderr
    r = _cli("--db", db, "--by", "colour")
    assert r.returncode == 2 and "invalid choice" in r.stderr


def _png_pixels(path: Path):
    """Decode an 8-bit RGB/RGBA PNG (enough for chromium screenshots): (w, h, rows)."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, w = 8, b"", None
    while pos < len(data):
        (n,), kind = struct.unpack(">I", data[pos : pos + 4]), data[pos + 4 : pos + 8]
        body = data[pos + 8 : pos + 8 + n]
        if kind == b"IHDR":
            w, h, depth, ctype = struct.unpack(">IIBB", body[:10])
            assert depth == 8 and ctype in (2, 6)
            bpp = 3 if ctype == 2 else 4
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    raw = zlib.decompress(idat)
    stride = w * bpp
    rows, prev = [], bytearray(stride)
    for y in range(h):
        f = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b = prev[i]
            c = prev[i - bpp] if i >= bpp else 0
            if f == 1:
                line[i] = (line[i] + a) & 255
            elif f == 2:
                line[i] = (line[i] + b) & 255
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(bytes(line))
        prev = line
    return w, h, bpp, rows


def _count_color(rows, bpp, rgb, tol=12):
    n = 0
    for line in rows:
        for i in range(0, len(line), bpp):
            if all(abs(line[i + k] - rgb[k]) <= tol for k in range(3)):
                n += 1
    return n


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.skipif(
    CHROMIUM is None,
    reason="chromium is not installed; .ci/services.sh installs Debian's chromium package",
)
def test_html_report_renders_in_headless_chromium(tmp_path):
    db = str(tmp_path / "l.db")
    _ledger(db).close()
    page = tmp_path / "report.html"
    r = _cli("--db", db, "--html", str(page))
    assert r.returncode == 0, r.stderr
    text = page.read_text()
    assert "<script" not in text and "http://" not in text and "https://" not in text
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
    # hit-rate chart: one point per hour, values 0 (hour 0: writes only), then
    # hour 1: 4*1000 / 4*1100 = 0.909091; hour 2: model-a 4000 read of 4400 plus model-b's
    # 6000 uncached (the local request is unreported) -> 4000 / 10400 = 0.384615
    pts = re.findall(r'<circle class="pt"[^>]*data-key="([^"]+)" data-value="([^"]+)"', html)
    assert [k for k, _ in pts] == ["2026-11-27T09:00Z", "2026-11-27T10:00Z", "2026-11-27T11:00Z"]
    assert [round(float(v), 6) for _, v in pts] == [0.0, 0.909091, 0.384615]
    bars = re.findall(
        r'<rect class="bar (\w+)"[^>]*width="([\d.]+)"[^>]*data-key="([^"]+)"'
        r'[^>]*data-value="([^"]+)"',
        html,
    )
    cost = {k: float(v) for cls, _, k, v in bars if cls == "cost"}
    assert cost == pytest.approx({"model-a": 0.0228, "model-b": 0.00606, "smol": 0.0})
    miss = {k: float(v) for cls, _, k, v in bars if cls == "miss"}
    # missed prompt tokens: P1 = 13,200 - 8,000 = 5,200; P2 = 3 * 2,000 = 6,000
    assert miss == {"b" * 16: 6000.0, "a" * 16: 5200.0}
    assert all(float(wd) > 0 for cls, wd, _, v in bars if float(v) > 0)
    # a real screenshot, saved with the test artefacts
    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / "report.png"
    if shot.exists():
        shot.unlink()
    r = subprocess.run(
        [CHROMIUM, *flags, f"--screenshot={shot}", "--window-size=900,1400", page.as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0 and shot.exists(), r.stderr[-2000:]
    shutil.copy(page, ARTIFACTS / "report.html")
    w, h, bpp, rows = _png_pixels(shot)
    assert (w, h) == (900, 1400)
    # the charts' colours are on screen: cost bars (#e07b39), line/points (#2f6fde),
    # miss bars (#c8463d)
    assert _count_color(rows, bpp, (0xE0, 0x7B, 0x39)) > 500
    assert _count_color(rows, bpp, (0x2F, 0x6F, 0xDE)) > 100
    assert _count_color(rows, bpp, (0xC8, 0x46, 0x3D)) > 500
