"""Host time of :meth:`SpeculativeDecoder.plan` (prompt lookup and the cost model) per engine
step, on this CPU, without a model: ``--batch`` running sequences in decode, each with a
``--prompt-len``-token random prompt over a large vocabulary (so that, as on the H200 run's
random-weight 8B shape, the lookup never matches), one random token appended to each per step;
the decoder's cost model is told a decode step takes ``--step-ms`` (default 7.3 ms: the 8B
shape at batch 64 on the H200, bench/RESULTS.md), which is what makes lookups back off there.
The peer in the same run: the same steps with the lookup back-off and lazy index extension off
(``SpeculativeDecoder.lookup_backoff = False``: every sequence indexes its new token and looks
up every step, as before 2026-12-01 session 3). Interleaved A/B rounds, best of ``--repeats``.
A ``--matching`` workload instead repeats one prompt-length block of tokens, so that every
lookup matches (the back-off must not cost those sequences their drafts: drafts counted).

Usage: ``python bench/spec_plan_cpu.py [--batch 64] [--steps 128] [--repeats 5]``. Prints a
table; asserts nothing.
"""

from __future__ import annotations

import argparse
import gc
import os
import random
import sys
import time
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from local_engine.sampling import SamplingParams  # noqa: E402
from local_engine.sequence import Sequence  # noqa: E402
from local_engine.spec_decode.config import SpeculativeConfig  # noqa: E402
from local_engine.spec_decode.decoder import SpeculativeDecoder  # noqa: E402


def make_decoder(pads: bool) -> SpeculativeDecoder:
    runner = SimpleNamespace(
        device="cpu", spec_graphs=object() if pads else None, num_blocks=1 << 20, block_size=16
    )
    spec = SpeculativeConfig("ngram", 4)
    return SpeculativeDecoder(spec, SimpleNamespace(seed=0), runner, None, max_model_len=1 << 16)


def make_seqs(batch, prompt_len, steps, vocab, matching, seed):
    rng = random.Random(seed)
    seqs, futures = [], []
    for i in range(batch):
        if matching:  # the generated text repeats the prompt: every lookup matches
            prompt = [rng.randrange(vocab) for _ in range(prompt_len)]
            future = (prompt * (steps // prompt_len + 2))[: steps + 1]
        else:
            prompt = [rng.randrange(vocab) for _ in range(prompt_len)]
            future = [rng.randrange(vocab) for _ in range(steps + 1)]
        p = SamplingParams(temperature=0, max_tokens=steps + 8)
        s = Sequence(f"s{i}", f"s{i}", 0, prompt, p)
        s.all_token_ids.append(future[0])  # the first sampled token: decode from here
        s.num_computed_tokens = s.num_tokens - 1
        s.max_total_len = prompt_len + steps + 8
        seqs.append(s)
        futures.append(future[1:])
    return seqs, futures


def run(dec, seqs, futures, steps):
    """Seconds in plan() over ``steps`` steps; drafts planned."""
    total, drafted = 0.0, 0
    for step in range(steps):
        t = time.perf_counter()
        dec.plan(seqs)
        total += time.perf_counter() - t
        for s, f in zip(seqs, futures):
            drafted += len(s.spec_token_ids)
            s.all_token_ids.append(f[step])  # a plain decode step: one token, no verification
            s.num_computed_tokens = s.num_tokens - 1
    return total, drafted


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--prompt-len", type=int, default=512)
    ap.add_argument("--steps", type=int, default=128)
    ap.add_argument("--vocab", type=int, default=128256, help="Llama 3's vocabulary")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--pads", action="store_true", help="padded (CUDA-graph) verification steps")
    ap.add_argument("--step-ms", type=float, default=7.3, help="decode step time told the policy")
    args = ap.parse_args()
    print("uptime:", os.popen("uptime").read().strip())
    rows = []
    for matching in (False, True):
        best: dict[str, tuple[float, int]] = {}
        for rep in range(args.repeats):
            for mode in ("eager (before)", "lazy + back-off"):
                seqs, fut = make_seqs(
                    args.batch, args.prompt_len, args.steps, args.vocab, matching, seed=rep
                )
                dec = make_decoder(args.pads)
                dec.adaptive = False  # drafts are not priced here: the lookup's own cost
                dec.cost.observe(args.batch, 0, args.step_ms * 1e-3)
                dec.lookup_backoff = mode != "eager (before)"
                gc.collect()  # (the same heap for both: the indexes' tuples trigger GC passes)
                r = run(dec, seqs, fut, args.steps)
                if mode not in best or r[0] < best[mode][0]:
                    best[mode] = r
        for mode, (sec, drafted) in best.items():
            rows.append(("matching" if matching else "no match", mode, sec, drafted))
    print(
        f"batch {args.batch}, prompts {args.prompt_len} tokens, {args.steps} steps, "
        f"decode step {args.step_ms} ms, best of {args.repeats}"
    )
    print("| workload | lookup | plan() us/step | us/sequence-step | drafts planned |")
    print("|---|---|---|---|---|")
    for w, mode, sec, drafted in rows:
        per = sec / args.steps
        print(f"| {w} | {mode} | {per * 1e6:.0f} | {per / args.batch * 1e6:.2f} | {drafted} |")
    print("uptime:", os.popen("uptime").read().strip())


if __name__ == "__main__":
    main()
