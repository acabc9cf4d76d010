"""Quality of the quantized KV cache on long contexts: the real SmolLM2-135M-Instruct on the CPU.

One long real text (the repository's own docs concatenated: docs/DESIGN.md, docs/sdk.md,
README.md, docs/rules/*.md, then bench/RESULTS.md until it is long enough) is run teacher-forced
through engines that differ only in ``kv_cache_dtype``: ``"auto"`` (float32 on the CPU,
the reference), and by default ``"int8"``, ``"fp8"``, ``"int4"`` and ``"int2"`` (``--dtypes``
picks). The context is fed in chunks: the first ``chunk - decode`` positions of each chunk as
one prefill over the cached, quantized prefix (every query reads the earlier tokens back from
the quantized pool, its own block too once that block is full), the last ``--decode``
positions one token a step, as generation runs (int2 reads a query's own, open block from its
full-precision residual slot there). At every position the next-token distributions are
compared, per phase (prefill, decode):

- top-1 agreement: argmax of the quantized run equals argmax of the reference;
- mean KL(p_ref || p_quant) in nats;
- mean NLL of the text's actual next token under each (quality against the data itself).

Positions are bucketed by context length: [0, 512), [512, 2k), [2k, 4k), [4k, 8k). One table.

Usage: ``PYTHONPATH=. .venv/bin/python bench/kv_quality.py [--max-context 8192] [--chunk 512]
[--decode 32] [--threads 1] [--dtypes int8,fp8,int4,int2]``. Cost on one shared core: about 4
x the time of one 8k prefill per engine, plus ``max_context / chunk * decode`` decode steps.
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
PHASES = ["prefill", "decode"]


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

    def logits(self, start: int, n: int) -> torch.Tensor:
        """Blocks for the step as the scheduler gives them (int2: the block it leaves open
        gets a residual slot)."""
        from local_engine.scheduler import ScheduledSequence, SchedulerOutput

        kv = self.engine.kv_cache_manager
        assert self.seq.num_computed_tokens == start
        assert kv.allocate_slots(self.seq, n) == []
        sched = SchedulerOutput([ScheduledSequence(self.seq, start, n)])
        batch = self.engine.runner.prepare(sched, [kv.block_ids(self.seq.seq_id)])
        batch.meta.logits_indices = torch.arange(n)
        out = self.engine.runner.forward_logits(batch)
        self.seq.num_computed_tokens = start + n
        return out


def accumulate(out, pos, phase, tgt, sums, ref_nll) -> None:
    """Add one chunk's positions ``pos`` (``phase`` True where decoded) to the per-(bucket,
    phase) sums: top-1 agreement with the reference (``out["auto"]``, log-probabilities),
    KL(ref || quant) and the NLL of the text's next tokens ``tgt``."""
    ref = out["auto"]
    ref_tok = ref.argmax(-1)
    for b in BUCKETS:
        for ph in PHASES:
            m = (pos >= b[0]) & (pos < b[1]) & (phase == (ph == "decode"))
            if not m.any():
                continue
            ref_nll[(b, ph)] += float(-ref[m].gather(1, tgt[m, None]).sum())
            for d in sums:
                q = out[d]
                s = sums[d][(b, ph)]
                s["n"] += int(m.sum())
                s["top1"] += int((q[m].argmax(-1) == ref_tok[m]).sum())
                s["kl"] += float((ref[m].exp() * (ref[m] - q[m])).sum())
                s["nll"] += float(-q[m].gather(1, tgt[m, None]).sum())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--max-context", type=int, default=8192)
    ap.add_argument("--chunk", type=int, default=512)
    ap.add_argument(
        "--decode", type=int, default=32, help="last positions of each chunk run one a step"
    )
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
    keys = [(b, ph) for b in BUCKETS for ph in PHASES]
    sums = {d: {k: dict(n=0, top1=0, kl=0.0, nll=0.0) for k in keys} for d in dtypes[1:]}
    ref_nll = {k: 0.0 for k in keys}
    timing = {d: 0.0 for d in dtypes}
    for start in range(0, n_pos, args.chunk):
        n = min(args.chunk, n_pos - start)
        n_pre = max(1, n - args.decode)
        steps = [(start, n_pre)] + [(p, 1) for p in range(start + n_pre, start + n)]
        out = {}
        for d, r in runners.items():
            t = time.time()
            parts = [r.logits(p, k) for p, k in steps]
            out[d] = torch.log_softmax(torch.cat(parts).double(), -1)
            timing[d] += time.time() - t
        pos = torch.arange(start, start + n)
        phase = torch.arange(n) >= n_pre  # True: decode
        accumulate(out, pos, phase, target[start : start + n], sums, ref_nll)
        print(f"  positions {start + n:>5}/{n_pos} done ({time.time() - t0:.0f}s)", flush=True)
    load = os.getloadavg()
    print()
    print(
        f"SmolLM2-135M-Instruct, CPU, {args.threads} thread(s), text = repo docs "
        f"({n_pos} positions, chunks of {args.chunk}, the last {args.decode} of each decoded); "
        "reference = float32 KV cache"
    )
    print(f"uptime load average: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    print()
    print(
        "| context bucket | phase | positions | KV | top-1 agreement | mean KL (nats) | "
        "NLL quant | NLL fp32 |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for k in keys:
        for d in sums:
            s = sums[d][k]
            if not s["n"]:
                continue
            print(
                f"| {k[0][0]}-{k[0][1]} | {k[1]} | {s['n']} | {d} | {s['top1'] / s['n']:.4f} | "
                f"{s['kl'] / s['n']:.5f} | {s['nll'] / s['n']:.4f} | {ref_nll[k] / s['n']:.4f} |"
            )
    print()
    print("seconds in forward passes: " + ", ".join(f"{d} {t:.0f}" for d, t in timing.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
