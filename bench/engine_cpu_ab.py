"""Paired before/after decode benchmark for a shared machine: the same decode run with two
checkouts' code, alternating in fresh processes (A, B, A, B, ...), each row beside the read
bandwidth measured just before it.

On a machine whose load changes by the minute, two tables taken an hour apart do not compare;
alternating rows a few seconds apart do. Each process loads the engine (weight cache filled),
decodes ``--new-tokens`` greedy tokens after a chat prompt per weight dtype (best of
``--reps``), and prints one JSON line.

Usage: ``PYTHONPATH=. .venv/bin/python bench/engine_cpu_ab.py --before /work/main
[--rounds 2] [--weight-dtype float32 int8]``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

_CHILD = textwrap.dedent(
    """
    import json, sys, time
    import torch
    # nothing from bench/ here: its modules put their own checkout first on sys.path
    import local_engine
    from local_engine.engine import LLMEngine
    from local_engine.sampling import SamplingParams
    threads, n, reps = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])

    def read_bandwidth(threads, mib=512, reps=3):  # as bench/profile_cpu.py's
        torch.set_num_threads(threads)
        buf = torch.ones(mib * 2**20 // 4)
        buf.sum()
        best = float("inf")
        for _ in range(reps):
            t = time.perf_counter()
            buf.sum()
            best = min(best, time.perf_counter() - t)
        return buf.numel() * 4 / best

    out = {{"_code": local_engine.__file__}}
    for wd in sys.argv[4:]:
        e = LLMEngine.from_model(None, num_kv_blocks=256, num_threads=threads, weight_dtype=wd)
        tok = e.tokenizer
        ids = tok.encode(tok.apply_chat_template([{{"role": "user", "content": "Tell me about bees."}}]))
        bw = read_bandwidth(threads, reps=3)
        best = 0.0
        for r in range(reps):
            e.add_request(f"d{{r}}", ids, SamplingParams(temperature=0.0, max_tokens=n + 1, ignore_eos=True))
            e.step()
            t = time.perf_counter()
            steps = 0
            while e.has_unfinished_requests():
                e.step()
                steps += 1
            best = max(best, steps / (time.perf_counter() - t))
        out[wd] = {{"tok_s": best, "bw": bw}}
        del e
    print(json.dumps(out))
    """
)


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", default="/work/main", help="checkout of the 'before' code")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--weight-dtype", nargs="+", default=["float32", "int8"])
    args = ap.parse_args()
    child = ROOT / "build" / "engine_cpu_ab_child.py"
    child.parent.mkdir(exist_ok=True)
    child.write_text(_CHILD.format())
    f32_bytes = 538.1e6  # SmolLM2-135M float32 weights read per token (profile_cpu.py)
    print(f"# {uptime()}")
    print(
        "| round | code | weights | tok/s | read GB/s just before | / float32-bytes floor |\n"
        "|---|---|---|---:|---:|---:|"
    )
    for r in range(args.rounds):
        for label, root in (("before", args.before), ("after", str(ROOT))):
            res = subprocess.run(
                [sys.executable, str(child), str(args.threads), str(args.new_tokens)]
                + [str(args.reps)]
                + args.weight_dtype,
                capture_output=True,
                text=True,
                env={**os.environ, "PYTHONPATH": root},
            )
            try:
                rows = json.loads(res.stdout.strip().splitlines()[-1])
            except (IndexError, ValueError):
                print(res.stderr[-2000:])
                raise
            code = rows.pop("_code")
            if not code.startswith(str(Path(root).resolve())):
                raise SystemExit(f"{label} imported {code}, not {root}")
            for wd, v in rows.items():
                floor = v["bw"] / f32_bytes
                print(
                    f"| {r + 1} | {label} | {wd} | {v['tok_s']:.1f} | {v['bw'] / 1e9:.1f} | "
                    f"{v['tok_s'] / floor:.2f} |"
                )
    print(f"# {uptime()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
