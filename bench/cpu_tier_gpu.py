"""CPU tier of the prefix cache on a CUDA GPU: Llama-3-8B's shape (random weights, bf16).

Two steps, on two machines (as bench/engine_gpu.py, whose model folders this reuses):

    python bench/cpu_tier_gpu.py prepare --dir .bench_models      # here: config + tokenizer
    python bench/cpu_tier_gpu.py run --dir .bench_models --out $OUT   # on the GPU machine
    python bench/cpu_tier_gpu.py run --dir .bench_models --device cpu --quick   # a toy check

The trace is bench/cpu_tier.py's, scaled: ``--requests`` (200) over ``--prefixes`` (64)
distinct ``--prefix-len``-token (8,192) prefixes, Zipf s = 0.8, seed 0, each request its prefix
plus a unique 16-token suffix and 8 greedy output tokens, ``--concurrency`` (4) requests in
flight (a closed loop). The device pool holds ``--pool-frac`` (a quarter) of the prefixes.
Configurations on the same trace: tier off (the peer), tier on (a pinned CPU tier holding the
working set), all on device (the floor: a pool holding every prefix, when it fits).

Measured: hit rate (cached prompt tokens / prompt tokens, both tiers, with the split), TTFT
mean and p95, throughput (prompt and output tokens per second of wall time), and the copy-back
bandwidth of the restores (bytes restored / CUDA-event time on the copy stream) against the
pinned-memory peak measured in the same run (``torch`` host-to-device copy of a 2 GiB pinned
buffer, best of 5, CUDA events). Results go to ``$OUT/cpu_tier_gpu.json``; a table is printed
last. Not a test: it prints, it does not assert.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from cpu_tier import SUFFIX_LEN, blocks_for, make_prompts, zipf_trace  # noqa: E402


def pinned_peak(gib: float = 2.0, repeats: int = 5) -> dict:
    """Host-to-device and device-to-host GB/s of one large pinned buffer (CUDA events)."""
    import torch

    n = int(gib * 2**30)
    host = torch.empty(n, dtype=torch.uint8, pin_memory=True)
    dev = torch.empty(n, dtype=torch.uint8, device="cuda")
    out = {}
    for name, dst, src in (("h2d", dev, host), ("d2h", host, dev)):
        dst.copy_(src, non_blocking=True)  # warm
        best = math.inf
        for _ in range(repeats):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            dst.copy_(src, non_blocking=True)
            b.record()
            b.synchronize()
            best = min(best, a.elapsed_time(b) / 1e3)
        out[name] = n / best / 1e9
    del host, dev
    torch.cuda.empty_cache()
    return out


def run_trace(engine, prompts, params, concurrency: int) -> dict:
    """Closed loop: ``concurrency`` requests in flight; per request TTFT and cached tokens."""
    pending = list(enumerate(prompts))[::-1]
    ttft, cached, cpu, out_tokens = {}, 0, 0, 0
    tokens = {}
    inflight = 0
    t0 = time.perf_counter()
    while pending or engine.has_unfinished_requests():
        while pending and inflight < concurrency:
            i, ids = pending.pop()
            engine.add_request(f"r{i}", ids, params)
            inflight += 1
        for o in engine.step():
            if o.finished:
                inflight -= 1
                ttft[o.request_id] = o.metrics.ttft
                cached += o.num_cached_tokens
                cpu += o.num_cpu_cached_tokens
                out_tokens += len(o.token_ids)
                tokens[o.request_id] = o.token_ids
    wall = time.perf_counter() - t0
    m = engine.metrics
    total = sum(len(p) for p in prompts)
    t = sorted(ttft.values())
    return {
        "hit_rate": cached / total,
        "cpu_hit_rate": cpu / total,
        "ttft_mean": statistics.fmean(t),
        "ttft_p95": t[max(0, math.ceil(0.95 * len(t)) - 1)],
        "wall_s": wall,
        "prompt_tok_s": total / wall,
        "output_tok_s": out_tokens / wall,
        "bytes_cpu_to_gpu": m.kv_bytes_cpu_to_gpu,
        "bytes_gpu_to_cpu": m.kv_bytes_gpu_to_cpu,
        "secs_cpu_to_gpu": m.kv_transfer_seconds_cpu_to_gpu,
        "secs_gpu_to_cpu": m.kv_transfer_seconds_gpu_to_cpu,
        "tier_evictions": m.cpu_cache_evictions,
        "tokens": tokens,
    }


def run(args) -> int:
    import torch

    from local_engine.engine import LLMEngine
    from local_engine.runner import kv_block_bytes
    from local_engine.sampling import SamplingParams

    cuda = args.device == "cuda"
    if args.quick:
        args.requests, args.prefixes, args.prefix_len = 24, 8, 256
    model = Path(args.dir) / ("llama3-8b-shape" if cuda and not args.small else "smollm2-135m")
    out_dir = Path(args.out) if args.out else None
    results: dict = {"args": vars(args), "model": model.name}

    def save():
        if out_dir is not None:
            out_dir.mkdir(parents=True, exist_ok=True)
            (out_dir / "cpu_tier_gpu.json").write_text(json.dumps(results, indent=1))

    if cuda:
        results["pinned_peak_gbps"] = pinned_peak()
        print(f"pinned peak: {results['pinned_peak_gbps']}", flush=True)
        save()
    trace = zipf_trace(args.requests, args.prefixes, args.zipf, args.seed)
    per_req = blocks_for(args.prefix_len + SUFFIX_LEN + 8)
    pool = max(1, round(args.prefixes * args.pool_frac)) * per_req
    distinct = len(set(trace))
    work = distinct * per_req + 2 * args.requests  # the working set, blocks
    common = dict(
        device=args.device,
        max_model_len=args.prefix_len + SUFFIX_LEN + 16,
        max_num_seqs=max(8, args.concurrency),
        max_num_batched_tokens=max(2048, args.prefix_len + SUFFIX_LEN),
        enforce_eager=True,
        seed=0,
    )
    params = SamplingParams(temperature=0.0, max_tokens=8, ignore_eos=True)
    probe = LLMEngine.from_config(model, num_kv_blocks=1, **common)
    bb = kv_block_bytes(probe.model_config, 16, probe.runner.kv_format)
    prompts = make_prompts(
        trace, args.prefixes, args.prefix_len, probe.model_config.vocab_size, args.seed
    )
    del probe
    if cuda:
        torch.cuda.empty_cache()
        free = torch.cuda.mem_get_info()[0]
    results.update(block_bytes=bb, pool_blocks=pool, working_set_blocks=work, distinct=distinct)
    print(
        f"# {model.name}: {args.requests} requests over {args.prefixes} prefixes of "
        f"{args.prefix_len} tokens ({distinct} used), Zipf s={args.zipf}, seed {args.seed}; "
        f"block {bb / 2**20:.2f} MiB; pool {pool} blocks ({pool * bb / 2**30:.1f} GiB); "
        f"working set {work * bb / 2**30:.1f} GiB",
        flush=True,
    )
    configs = [("tier off (peer)", pool, 0), ("tier on", pool, work)]
    if not cuda or (work + per_req) * bb < free - 24 * 2**30:  # weights + activations
        configs.append(("all on device (floor)", work + per_req, 0))
    rows = []
    for name, nb, tier in configs:
        t0 = time.perf_counter()
        e = LLMEngine.from_config(model, num_kv_blocks=nb, cpu_cache_memory=tier * bb, **common)
        build = time.perf_counter() - t0
        r = run_trace(e, prompts, params, args.concurrency)
        r.update(name=name, pool=nb, tier=tier, build_s=build)
        rows.append(r)
        results.setdefault("rows", []).append({k: v for k, v in r.items() if k != "tokens"})
        save()
        print(f"  {name}: {r['wall_s']:.1f}s (engine built in {build:.1f}s)", flush=True)
        del e
        if cuda:
            torch.cuda.empty_cache()
    floor = next((r for r in rows if r["name"].startswith("all")), None)
    if floor is not None:  # greedy agreement of the tier run with the floor run (report only)
        on = rows[1]["tokens"]
        same = sum(on[k] == floor["tokens"][k] for k in on)
        results["greedy_same_as_floor"] = [same, len(on)]
    save()
    base = rows[0]
    peak = results.get("pinned_peak_gbps", {}).get("h2d")
    print()
    print(
        "| config | pool (blocks) | CPU tier (blocks) | hit rate | of which CPU | x off | "
        "TTFT mean (s) | TTFT p95 (s) | prompt tok/s | output tok/s | restore GB/s | "
        "of pinned peak |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        bw = r["bytes_cpu_to_gpu"] / r["secs_cpu_to_gpu"] / 1e9 if r["secs_cpu_to_gpu"] else None
        print(
            f"| {r['name']} | {r['pool']} | {r['tier']} | {r['hit_rate']:.1%} | "
            f"{r['cpu_hit_rate']:.1%} | {r['hit_rate'] / base['hit_rate']:.2f} | "
            f"{r['ttft_mean']:.3f} | {r['ttft_p95']:.3f} | {r['prompt_tok_s']:.0f} | "
            f"{r['output_tok_s']:.0f} | {'-' if bw is None else f'{bw:.1f}'} | "
            f"{'-' if (bw is None or not peak) else f'{bw / peak:.0%}'} |"
        )
    if peak:
        print(
            f"pinned-memory peak: H2D {peak:.1f} GB/s, D2H {results['pinned_peak_gbps']['d2h']:.1f} GB/s"
        )
    if "greedy_same_as_floor" in results:
        s, n = results["greedy_same_as_floor"]
        print(f"greedy tokens, tier on vs all on device: {s}/{n} requests identical")
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("prepare", help="write the model folders (config + tokenizer)")
    p.add_argument("--dir", default=".bench_models")
    r = sub.add_parser("run", help="run the trace")
    r.add_argument("--dir", default=".bench_models")
    r.add_argument("--out", default=os.environ.get("OUT"))
    r.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    r.add_argument("--quick", action="store_true", help="24 requests, 8 prefixes of 256")
    r.add_argument("--small", action="store_true", help="SmolLM2's shape on CUDA too")
    r.add_argument("--requests", type=int, default=200)
    r.add_argument("--prefixes", type=int, default=64)
    r.add_argument("--prefix-len", type=int, default=8192)
    r.add_argument("--pool-frac", type=float, default=0.25)
    r.add_argument("--concurrency", type=int, default=4)
    r.add_argument("--zipf", type=float, default=0.8)
    r.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    if args.cmd == "prepare":
        from engine_gpu import prepare

        prepare(Path(args.dir))
        return 0
    return run(args)


if __name__ == "__main__":
    raise SystemExit(main())
