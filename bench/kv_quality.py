"""Quality of the quantized KV cache on long contexts: the real SmolLM2-135M-Instruct on the CPU.

One long real text (the repository's own docs concatenated: docs/DESIGN.md, docs/sdk.md,
README.md, docs/rules/*.md, then bench/RESULTS.md until it is long enough) is run teacher-forced
through engines that differ only in ``kv_cache_dtype``: ``"auto"`` (float32 on the CPU,
the reference), and by default ``"int8"``, ``"fp8"``, ``"int4"`` and ``"int2"`` (``--dtypes`` picks). The context is fed in chunks (chunked prefill over the
cached, quantized prefix: every chunk's attention reads the earlier tokens back from the
quantized pool), and at every position the next-token distributions are compared:

- top-1 agreement: argmax of the quantized run equals argmax of the reference;
- mean KL(p_ref || p_quant) in nats;
- mean NLL of the text's actual next token under each (quality against the data itself).

Positions are bucketed by context length: [0, 512), [512, 2k), [2k, 4k), [4k, 8k). One table.

Usage: ``PYTHONPATH=. .venv/bin/python bench/kv_quality.py [--max-context 8192] [--chunk 512]
[--threads 1] [--dtypes int8,fp8,int4,int2]``. Cost on one shared core: about 4 x the time of one 8k prefill per engine.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
BUCKETS = [(0, 512), (512, 2048), (2048, 4096), (4096, 8192)]
DTYPES = ["auto", "int8", "fp8", "int4", "int2"]


def long_text() -> str:
    """The repository's docs concatenated (prose first, then the benchmark notes)."""
    files = [ROOT / "docs/DESIGN.md", ROOT / "docs/sdk.md", ROOT / "README.md"]
    files += sorted((ROOT / "docs/rules").glob("*.md"))
    files += [ROOT / "bench/RESULTS.md"]
    return "\n\n".join(f.read_text() for f in files if f.is_file())


def make_engine(kv_dtype: str, max_context: int, threads: int):
    from local_engine.engine import LLMEngine

    return LLMEngine.from_model(
        None,
        kv_cache_dtype=kv_dtype,
        num_kv_blocks=max_context // 16 + 4,
        max_model_len=max_context + 16,
        enable_prefix_caching=False,
        num_threads=threads,
    )


class Runner:
    """One engine holding one long sequence; ``logits(start, n)`` runs positions
    ``[start, start + n)`` (its K/V written, attention over everything before) and returns
    float32 logits ``[n, vocab]``."""

    def __init__(self, engine, ids):
        from local_engine.sampling import SamplingParams
        from local_engine.sequence import Sequence

        self.engine = engine
        self.seq = Sequence("kvq", "kvq", 0, list(ids), SamplingParams())
        assert engine.kv_cache_manager.allocate_slots(self.seq, len(ids)) is not None

    def logits(self, start: int, n: int) -> torch.Tensor:
        from local_engine.scheduler import ScheduledSequence, SchedulerOutput

        sched = SchedulerOutput([ScheduledSequence(self.seq, start, n)])
        kv = self.engine.kv_cache_manager
        batch = self.engine.runner.prepare(sched, [kv.block_ids(self.seq.seq_id)])
        batch.meta.logits_indices = torch.arange(n)
        return self.engine.runner.forward_logits(batch)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--max-context", type=int, default=8192)
    ap.add_argument("--chunk", type=int, default=512)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument(
        "--dtypes", default=",".join(DTYPES[1:]), help="KV dtypes against the float32 cache"
    )
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    t0 = time.time()
    dtypes = ["auto"] + [d for d in args.dtypes.split(",") if d and d != "auto"]
    engines = {d: make_engine(d, args.max_context, args.threads) for d in dtypes}
    tok = engines["auto"].tokenizer
    ids = tok.encode(long_text())
    if len(ids) < args.max_context + 1:
        print(f"text has only {len(ids)} tokens; using {len(ids) - 1} positions")
    n_pos = min(args.max_context, len(ids) - 1)
    ids = ids[: n_pos + 1]
    runners = {d: Runner(e, ids) for d, e in engines.items()}
    target = torch.tensor(ids[1:])
    sums = {
        d: {b: dict(n=0, top1=0, kl=0.0, nll=0.0) for b in BUCKETS} for d in dtypes if d != "auto"
    }
    ref_nll = {b: 0.0 for b in BUCKETS}
    timing = {d: 0.0 for d in dtypes}
    for start in range(0, n_pos, args.chunk):
        n = min(args.chunk, n_pos - start)
        out = {}
        for d, r in runners.items():
            t = time.time()
            out[d] = torch.log_softmax(r.logits(start, n).double(), -1)
            timing[d] += time.time() - t
        pos = torch.arange(start, start + n)
        ref = out["auto"]
        tgt = target[start : start + n]
        ref_tok = ref.argmax(-1)
        for b in BUCKETS:
            m = (pos >= b[0]) & (pos < b[1])
            if not m.any():
                continue
            ref_nll[b] += float(-ref[m].gather(1, tgt[m, None]).sum())
            for d in sums:
                q = out[d]
                s = sums[d][b]
                s["n"] += int(m.sum())
                s["top1"] += int((q[m].argmax(-1) == ref_tok[m]).sum())
                s["kl"] += float((ref[m].exp() * (ref[m] - q[m])).sum())
                s["nll"] += float(-q[m].gather(1, tgt[m, None]).sum())
        print(f"  positions {start + n:>5}/{n_pos} done ({time.time() - t0:.0f}s)", flush=True)
    load = os.getloadavg()
    print()
    print(
        f"SmolLM2-135M-Instruct, CPU, {args.threads} thread(s), text = repo docs "
        f"({n_pos} positions, chunks of {args.chunk}); reference = float32 KV cache"
    )
    print(f"uptime load average: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    print()
    print(
        "| context bucket | positions | KV | top-1 agreement | mean KL (nats) | NLL quant | NLL fp32 |"
    )
    print("|---|---|---|---|---|---|---|")
    for b in BUCKETS:
        for d in sums:
            s = sums[d][b]
            if not s["n"]:
                continue
            print(
                f"| {b[0]}-{b[1]} | {s['n']} | {d} | {s['top1'] / s['n']:.4f} | "
                f"{s['kl'] / s['n']:.5f} | {s['nll'] / s['n']:.4f} | {ref_nll[b] / s['n']:.4f} |"
            )
    print()
    print("seconds in forward passes: " + ", ".join(f"{d} {t:.0f}" for d, t in timing.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
