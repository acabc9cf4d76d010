"""Every example program runs against the local engine and prints numbers that add up.

The server comes from the package's own pytest plugin (``promptcache_engine``, automatic
cache mode: every full 16-token block is cacheable). Expected values are worked out here
from the printed token counts and the prices stated below, not read back from the SDK.
"""

from __future__ import annotations

import re
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BLOCK = 16  # the engine's default block size: cached counts are whole blocks


def run_example(name: str, *args: str) -> str:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "examples" / name), *args],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


def test_build_and_wrap(promptcache_engine, tmp_path):
    out = run_example(
        "build_and_wrap.py",
        "--base-url",
        promptcache_engine.openai_base_url,
        "--db",
        str(tmp_path / "ledger.db"),
    )
    rows = [tuple(map(int, m)) for m in re.findall(r"prompt (\d+) tokens, cached (\d+)", out)]
    assert len(rows) == 3
    (p1, c1), (p2, c2), (p3, c3) = rows
    assert c1 == 0  # a fresh server: nothing cached yet
    # The frozen policy + tools are byte-identical, so all but the last partial block and
    # the dynamic tail are reused; cached counts are whole blocks.
    for p, c in ((p2, c2), (p3, c3)):
        assert c % BLOCK == 0 and c >= p - 64, (p, c)
    # The ledger's token-weighted hit rate is sum(cached) / sum(prompt).
    expected = (c1 + c2 + c3) / (p1 + p2 + p3)
    printed = float(re.search(r"hit rate ([0-9.]+)", out).group(1))
    assert printed == pytest.approx(expected, abs=0.005)


def test_usage_and_cost(promptcache_engine):
    out = run_example(
        "usage_and_cost.py",
        "--base-url",
        promptcache_engine.openai_base_url,
        "--price-model",
        "gpt-4.1",
    )
    # gpt-4.1, USD per million tokens (openai.com/api/pricing, read 2026-11-29):
    # input 2.00, cached input 0.50, output 8.00.
    pat = (
        r"(cold|warm): uncached (\d+), cache read (\d+), output (\d+), hit rate ([0-9.]+), "
        r"cost \$([0-9.]+) \(no cache \$([0-9.]+), saving \$([0-9.]+)\)"
    )
    rows = re.findall(pat, out)
    assert [r[0] for r in rows] == ["cold", "warm"], out
    for _, unc, read, outp, _hr, total, base, saving in rows:
        unc, read, outp = int(unc), int(read), int(outp)
        exp_total = (Decimal(unc) * 2 + Decimal(read) * Decimal("0.5") + Decimal(outp) * 8) / 10**6
        exp_base = (Decimal(unc + read) * 2 + Decimal(outp) * 8) / 10**6
        assert Decimal(total) == exp_total.quantize(Decimal("0.000001"))
        assert Decimal(base) == exp_base.quantize(Decimal("0.000001"))
        assert Decimal(saving) == (exp_base - exp_total).quantize(Decimal("0.000001"))
    cold, warm = rows
    assert int(cold[2]) == 0 and int(warm[2]) > 0 and int(warm[2]) % BLOCK == 0
    assert int(cold[1]) == int(warm[1]) + int(warm[2])  # same prompt, split differently


def test_anthropic_client(promptcache_engine):
    out = run_example("anthropic_client.py", "--base-url", promptcache_engine.base_url)
    rows = [
        tuple(map(int, m))
        for m in re.findall(r"input (\d+), cache read (\d+), cache write (\d+)", out)
    ]
    assert len(rows) == 2
    (i1, r1, _), (i2, r2, _) = rows
    assert r1 == 0 and r2 > 0 and r2 % BLOCK == 0
    # Anthropic's input_tokens excludes cache reads; the shared system prompt (~2,100
    # tokens) is read from the cache, only the question and the last partial block are not.
    assert i2 < 64 and abs((i2 + r2) - i1) < 16


def test_offline_engine():
    out = run_example("offline_engine.py")
    rows = [
        tuple(map(int, m))
        for m in re.findall(r"prompt (\d+) tokens, (\d+) from the prefix cache", out)
    ]
    assert len(rows) == 2
    (p1, c1), (p2, c2) = rows
    assert c1 == 0 and c2 > 0 and c2 % BLOCK == 0 and c2 <= p2 - 1
    assert "Paris" in out  # greedy SmolLM2 knows this one
