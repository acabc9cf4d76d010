"""CPU tier of the prefix cache on the CPU, with the real SmolLM2-135M-Instruct (float32).

A trace of requests over distinct prefixes, drawn Zipf-distributed (``p(k) ~ 1 / k**s`` for
the k-th most popular prefix; default s = 0.8, seed 0), each request its prefix plus a unique
16-token suffix, sent one at a time (a closed loop: TTFT is the request's own prefill,
restore included), 1 output token each. The device pool (here host memory too: the "GPU" pool
of a CPU engine) holds ``--pool-prefixes`` prefixes' worth of blocks. Configurations, all on
the same trace in the same run:

- ``tier off``: the peer (today's engine: LRU eviction drops the KV);
- ``tier on``: a CPU tier big enough for the whole working set (``cpu_cache_memory``);
- ``tier full``: a tier smaller than the working set (``--small-tier-prefixes`` prefixes);
- ``all on device``: the floor: a device pool that holds every prefix (a repeat is always a
  device hit; only first touches miss).

Hit rate = cached prompt tokens / prompt tokens (the engine's counters; both tiers), with the
device/CPU split. TTFT is the engine's ``RequestMetrics.ttft`` (arrival to first token).

Usage: ``.venv/bin/python bench/cpu_tier.py [--quick] [--zipf S] [--seed N]``.
Not a test: it prints, it does not assert.
"""

from __future__ import annotations

import argparse
import math
import os
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

SUFFIX_LEN = 16


def zipf_trace(num_requests: int, num_prefixes: int, exponent: float, seed: int) -> list[int]:
    """Prefix index of each request: ``p(k) ~ 1 / (k + 1) ** exponent``, seeded."""
    rng = random.Random(seed)
    weights = [1.0 / (k + 1) ** exponent for k in range(num_prefixes)]
    return rng.choices(range(num_prefixes), weights=weights, k=num_requests)


def make_prompts(trace, num_prefixes, prefix_len, vocab, seed):
    """Token ids per request: its prefix (random ids, one list per prefix) + a unique
    suffix."""
    rng = random.Random(seed + 1)
    prefixes = [[rng.randrange(vocab) for _ in range(prefix_len)] for _ in range(num_prefixes)]
    return [prefixes[p] + [rng.randrange(vocab) for _ in range(SUFFIX_LEN)] for p in trace]


def blocks_for(tokens: int, block_size: int = 16) -> int:
    return -(-tokens // block_size)


def run_trace(engine, prompts, params) -> dict:
    """Send ``prompts`` one at a time; per request its TTFT and cached tokens by tier."""
    ttft, cached, cpu = [], 0, 0
    t0 = time.perf_counter()
    for i, ids in enumerate(prompts):
        engine.add_request(f"r{i}", ids, params)
        out = None
        while engine.has_unfinished_requests():
            for o in engine.step():
                if o.finished:
                    out = o
        ttft.append(out.metrics.ttft)
        cached += out.num_cached_tokens
        cpu += out.num_cpu_cached_tokens
    wall = time.perf_counter() - t0
    m = engine.metrics
    total = sum(len(p) for p in prompts)
    return {
        "hit_rate": cached / total,
        "gpu_hit_rate": (cached - cpu) / total,
        "cpu_hit_rate": cpu / total,
        "ttft_mean": statistics.fmean(ttft),
        "ttft_p95": sorted(ttft)[max(0, math.ceil(0.95 * len(ttft)) - 1)],
        "wall": wall,
        "bytes_back": m.kv_bytes_cpu_to_gpu,
        "bytes_out": m.kv_bytes_gpu_to_cpu,
        "secs_back": m.kv_transfer_seconds_cpu_to_gpu,
        "tier_evictions": m.cpu_cache_evictions,
        "refused": m.cpu_cache_offers_refused,
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="60 requests, 12 prefixes of 512")
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--prefixes", type=int, default=40)
    ap.add_argument("--prefix-len", type=int, default=1500)
    ap.add_argument("--pool-prefixes", type=int, default=8)
    ap.add_argument("--small-tier-prefixes", type=int, default=16)
    ap.add_argument("--zipf", type=float, default=0.8, help="Zipf exponent s (default 0.8)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument(
        "--only",
        default="off,on,full,floor",
        help="configurations to run, comma-separated from off,on,full,floor (default all)",
    )
    args = ap.parse_args(argv)
    if args.quick:
        args.requests, args.prefixes, args.prefix_len = 60, 12, 512
        args.pool_prefixes, args.small_tier_prefixes = 3, 5

    import torch

    from local_engine.engine import LLMEngine
    from local_engine.runner import kv_block_bytes
    from local_engine.sampling import SamplingParams

    if args.threads:
        torch.set_num_threads(args.threads)
    trace = zipf_trace(args.requests, args.prefixes, args.zipf, args.seed)
    per_req = blocks_for(args.prefix_len + SUFFIX_LEN + 1)
    pool = args.pool_prefixes * per_req
    params = SamplingParams(temperature=0.0, max_tokens=1)

    first = LLMEngine.from_model(None, num_kv_blocks=1, num_threads=args.threads)
    bb = kv_block_bytes(first.model_config, 16, first.runner.kv_format)
    prompts = make_prompts(
        trace, args.prefixes, args.prefix_len, first.model_config.vocab_size, args.seed
    )
    del first

    def engine(num_blocks, tier_blocks):
        return LLMEngine.from_model(
            None,
            num_kv_blocks=num_blocks,
            num_threads=args.threads,
            max_num_batched_tokens=2048,
            cpu_cache_memory=tier_blocks * bb,
        )

    # the whole working set: every prefix's blocks plus each request's unique tail blocks
    all_blocks = args.prefixes * per_req + 2 * args.requests
    keys = ["off", "on", "full", "floor"]
    configs = [
        ("tier off (peer)", pool, 0),
        ("tier on", pool, all_blocks),
        (
            f"tier full ({args.small_tier_prefixes} prefixes)",
            pool,
            args.small_tier_prefixes * per_req,
        ),
        ("all on device (floor)", all_blocks + per_req, 0),
    ]
    wanted = set(args.only.split(","))
    configs = [c for k, c in zip(keys, configs) if k in wanted]
    print(
        f"# trace: {args.requests} requests over {args.prefixes} prefixes of {args.prefix_len} "
        f"tokens + {SUFFIX_LEN} unique, Zipf s={args.zipf}, seed {args.seed}; "
        f"{len(set(trace))} distinct prefixes used; device pool {pool} blocks "
        f"({args.pool_prefixes} prefixes); load {os.getloadavg()[0]:.1f}",
        flush=True,
    )
    rows = []
    for name, nb, tier in configs:
        e = engine(nb, tier)
        r = run_trace(e, prompts, params)
        r.update(name=name, pool=nb, tier=tier, load=os.getloadavg()[0])
        rows.append(r)
        print(
            f"  done {name}: {r['wall']:.0f}s, hit rate {r['hit_rate']:.1%} (CPU "
            f"{r['cpu_hit_rate']:.1%}), TTFT mean {r['ttft_mean']:.3f}s p95 {r['ttft_p95']:.3f}s",
            flush=True,
        )
        del e
    base = rows[0]
    print()
    print(
        "| config | device pool (blocks) | CPU tier (blocks) | hit rate | of which CPU | "
        "x off | TTFT mean (s) | TTFT p95 (s) | TTFT mean / off | restored GB/s | "
        "tier evictions | load |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        bw = r["bytes_back"] / r["secs_back"] / 1e9 if r["secs_back"] else float("nan")
        print(
            f"| {r['name']} | {r['pool']} | {r['tier']} | {r['hit_rate']:.1%} | "
            f"{r['cpu_hit_rate']:.1%} | {r['hit_rate'] / base['hit_rate']:.2f} | "
            f"{r['ttft_mean']:.3f} | {r['ttft_p95']:.3f} | "
            f"{r['ttft_mean'] / base['ttft_mean']:.2f} | {bw:.1f} | {r['tier_evictions']} | "
            f"{r['load']:.1f} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
