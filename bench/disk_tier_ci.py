"""A CI-shaped run of the disk tier: an application's pytest session (the promptcache plugin's
server, SmolLM2 on this CPU) run three times:

1. ``--promptcache-disk-cache-dir DIR`` on an empty folder (the first CI run);
2. the same folder kept (the next CI run: the server starts with the first run's prefixes on
   disk);
3. without the option (the peer: every CI run today, a cold cache).

The suite: ``--tests`` tests, each sending one chat request (a ``--system-tokens``-token system
prompt shared by all, a different user question, 1 output token). Printed per session: its
wall time (server start included), the first request's latency (client-side, arrival to
response) and its cached tokens by tier (the usage field ``promptcache_cache_tiers``), and the
sum of all requests' latencies.

Usage: ``PYTHONPATH=. .venv/bin/python bench/disk_tier_ci.py [--tests 6]``. Prints; asserts
nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

APP = textwrap.dedent(
    """
    import json, os, time
    import pytest

    SYSTEM = open(os.environ["SYSTEM_FILE"]).read()
    OUT = os.environ["RESULT_FILE"]

    @pytest.mark.parametrize("i", range(int(os.environ["NUM_TESTS"])))
    def test_question(promptcache_openai, i):
        t0 = time.perf_counter()
        r = promptcache_openai.chat.completions.create(
            model="local", max_tokens=1, temperature=0,
            messages=[{"role": "system", "content": SYSTEM},
                      {"role": "user", "content": f"Question {i}: which part do I need?"}])
        dt = time.perf_counter() - t0
        with open(OUT, "a") as fh:
            fh.write(json.dumps({"i": i, "s": dt, "prompt": r.usage.prompt_tokens,
                                 "tiers": r.usage.model_extra.get("promptcache_cache_tiers")}) + "\\n")
    """
)


def session(work: Path, name: str, disk: Path | None, tests: int) -> dict:
    result = work / f"{name}.jsonl"
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(work / "app")]
    if disk is not None:
        cmd[-1:-1] = ["--promptcache-disk-cache-dir", str(disk)]
    env = {
        **os.environ,
        "RESULT_FILE": str(result),
        "SYSTEM_FILE": str(work / "system.txt"),
        "NUM_TESTS": str(tests),
        "PYTHONPATH": str(ROOT),
    }
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=work, env=env, timeout=3000)
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        raise SystemExit(p.stdout[-2000:] + p.stderr[-2000:])
    rows = [json.loads(x) for x in result.read_text().splitlines()]
    return {"wall": wall, "rows": rows}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tests", type=int, default=6)
    ap.add_argument("--system-tokens", type=int, default=1500)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="kv-disk-ci-"))
    (work / "app").mkdir()
    (work / "app" / "test_app.py").write_text(APP)
    words = (ROOT / "docs" / "DESIGN.md").read_text().split()
    # about 1.3 tokens a word in this text for SmolLM2's tokenizer: trimmed by word count
    (work / "system.txt").write_text(" ".join(words[: int(args.system_tokens / 1.3)]))
    disk = work / "kv"
    runs = [
        ("1: disk tier, empty folder", session(work, "first", disk, args.tests)),
        ("2: disk tier, folder kept", session(work, "second", disk, args.tests)),
        ("3: no disk tier (peer)", session(work, "peer", None, args.tests)),
    ]
    print(f"# CI-shaped run: {args.tests} tests, shared system prompt, SmolLM2 on the CPU")
    print(
        f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}"
    )
    print("| session | wall s | first request s | its cached tokens (tiers) | all requests s |")
    print("|---|---:|---:|---|---:|")
    for label, r in runs:
        first = min(r["rows"], key=lambda x: x["i"])
        total = sum(x["s"] for x in r["rows"])
        print(
            f"| {label} | {r['wall']:.1f} | {first['s']:.2f} | "
            f"{first['prompt']} prompt: {first['tiers']} | {total:.2f} |"
        )


if __name__ == "__main__":
    main()
