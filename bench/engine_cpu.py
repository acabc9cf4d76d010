"""CPU benchmark of the local engine on the embedded SmolLM2-135M-Instruct model.

Three measurements, each printed with its peer measured in the same run and the ratio:

1. TTFT of a request whose 2,000-token prefix is cached vs the same request cold
   (target: cached <= 10 % of cold).
2. Output tokens per second for 16 concurrent requests vs Hugging Face transformers
   ``generate`` (float32, same GGUF file, greedy) running them one after another
   (target: >= 4x).
3. KV memory waste with 64 concurrent requests of mixed lengths: allocated token slots not
   holding a token, over allocated slots, sampled after every step (target: < 4 %); peer: a
   contiguous per-request cache reserved for prompt + max_tokens (a static, non-paged KV
   cache), over the same sequences at the same steps.

Usage: ``.venv/bin/python bench/engine_cpu.py [--threads N] [--quick]``. Not a test: it prints,
it does not assert.

``bench/engine_cpu.py --single [options]`` runs issue 18's single-stream tables instead
(decode per weight dtype, warm TTFT, cold start, the pytest plugin's cost:
:mod:`bench.engine_cpu_single`, whose ``--help`` lists the options).
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from local_engine.engine import LLMEngine  # noqa: E402
from local_engine.sampling import SamplingParams  # noqa: E402


def run_all(engine):
    final = {}
    while engine.has_unfinished_requests():
        for o in engine.step():
            if o.finished:
                final[o.request_id] = o
    return final


def filler(tok, n, seed):
    rng = random.Random(seed)
    words = (
        "policy customer refund shipping order invoice warranty account billing support "
        "delivery return exchange product service manager ticket update status escalation"
    ).split()
    text = " ".join(rng.choice(words) for _ in range(n * 2))
    ids = tok.encode(text)
    assert len(ids) >= n
    return ids[:n]


def bench_ttft(engine, prefix_len, reps):
    tok = engine.tokenizer
    p = SamplingParams(temperature=0.0, max_tokens=1)
    cold, cached = [], []
    for r in range(reps):
        prefix = filler(tok, prefix_len, seed=1000 + r)
        q1 = tok.encode(f" Question {r}: what is the refund window?")
        q2 = tok.encode(f" Question {r}: how do I reach support?")
        engine.add_request(f"cold-{r}", prefix + q1, p)
        t = time.perf_counter()
        out = run_all(engine)[f"cold-{r}"]
        cold.append(time.perf_counter() - t)
        assert out.num_cached_tokens == 0
        engine.add_request(f"warm-{r}", prefix + q2, p)
        t = time.perf_counter()
        out = run_all(engine)[f"warm-{r}"]
        cached.append(time.perf_counter() - t)
        assert out.num_cached_tokens == prefix_len // 16 * 16
    return statistics.median(cold), statistics.median(cached), len(prefix + q1)


def chat_prompts(tok, n):
    topics = [
        "volcanoes",
        "jazz",
        "the Roman empire",
        "photosynthesis",
        "chess openings",
        "coffee brewing",
        "black holes",
        "the French revolution",
        "origami",
        "bees",
        "glaciers",
        "the printing press",
        "sourdough bread",
        "octopuses",
        "Mars rovers",
        "the Silk Road",
    ]
    return [
        tok.encode(tok.apply_chat_template([{"role": "user", "content": f"Tell me about {t}."}]))
        for t in topics[:n]
    ]


def bench_throughput(engine, hf_model, n_req, new_tokens):
    tok = engine.tokenizer
    prompts = chat_prompts(tok, n_req)
    p = SamplingParams(temperature=0.0, max_tokens=new_tokens, ignore_eos=True)
    for i, ids in enumerate(prompts):
        engine.add_request(f"tp-{i}", ids, p)
    t = time.perf_counter()
    out = run_all(engine)
    ours_s = time.perf_counter() - t
    ours_tokens = sum(len(o.token_ids) for o in out.values())

    hf_tokens = 0
    t = time.perf_counter()
    with torch.inference_mode():
        for ids in prompts:
            g = hf_model.generate(
                torch.tensor([ids]),
                max_new_tokens=new_tokens,
                min_new_tokens=new_tokens,
                do_sample=False,
                pad_token_id=tok.pad_token_id,
            )
            hf_tokens += g.shape[1] - len(ids)
    hf_s = time.perf_counter() - t
    return ours_tokens / ours_s, hf_tokens / hf_s, ours_tokens, ours_s, hf_tokens, hf_s


def bench_waste(engine, n_req, seed):
    rng = random.Random(seed)
    tok = engine.tokenizer
    kv = engine.kv_cache_manager
    reqs = []
    for i in range(n_req):
        plen = rng.randint(20, 400)
        max_new = rng.randint(8, 48)
        reqs.append((filler(tok, plen, seed=5000 + i), max_new))
        engine.add_request(
            f"w-{i}",
            reqs[-1][0],
            SamplingParams(temperature=0.0, max_tokens=max_new, ignore_eos=True),
        )
    paged, contiguous, peak = [], [], (0, 0, 0)
    while engine.has_unfinished_requests():
        engine.step()
        seqs = engine.scheduler.running
        allocated = sum(len(kv.req_blocks.get(s.seq_id, ())) for s in seqs) * kv.block_size
        used = sum(s.num_computed_tokens for s in seqs)
        # the peer, over the same sequences at the same moment: a contiguous per-request
        # cache reserved for prompt + max_tokens up front (a static, non-paged KV cache)
        reserved = sum(s.num_prompt_tokens + s.params.max_tokens for s in seqs)
        if allocated:
            paged.append((allocated - used) / allocated)
            contiguous.append((reserved - used) / reserved)
            if len(seqs) > peak[0]:
                peak = (len(seqs), allocated, used)
    return statistics.mean(paged), max(paged), peak, statistics.mean(contiguous)


def bench_steps(engine, prompt_len=1200, decode_steps=20):
    """Cold prefill of one ``prompt_len``-token prompt, then mean decode-step time at batch 1
    and 8 (what the demo's workload is made of)."""
    tok = engine.tokenizer
    p = SamplingParams(temperature=0.0, max_tokens=1)
    engine.add_request("steps-cold", filler(tok, prompt_len, seed=42), p)
    t = time.perf_counter()
    run_all(engine)
    cold = time.perf_counter() - t
    per_step = {}
    for bsz in (1, 8):
        for i in range(bsz):
            engine.add_request(
                f"steps-{bsz}-{i}",
                tok.encode(f"Tell me a story, number {i}."),
                SamplingParams(temperature=0.0, max_tokens=decode_steps + 1, ignore_eos=True),
            )
        engine.step()  # the prefills
        t = time.perf_counter()
        for _ in range(decode_steps):
            engine.step()
        per_step[bsz] = (time.perf_counter() - t) / decode_steps
        run_all(engine)
    return cold, per_step


def main() -> int:
    if "--single" in sys.argv:
        sys.argv.remove("--single")
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        import engine_cpu_single

        return engine_cpu_single.main()
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--threads", type=int, default=None, help="torch CPU threads (default: torch's)"
    )
    ap.add_argument("--prefix", type=int, default=2000, help="cached prefix length for TTFT")
    ap.add_argument("--reps", type=int, default=3, help="TTFT repetitions (median)")
    ap.add_argument("--concurrent", type=int, default=16)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--waste-requests", type=int, default=64)
    ap.add_argument("--quick", action="store_true", help="smaller run (prefix 500, 4 requests)")
    ap.add_argument(
        "--steps-only",
        action="store_true",
        help="only time a cold 1,200-token prefill and decode steps at batch 1 and 8",
    )
    args = ap.parse_args()
    if args.quick:
        args.prefix, args.reps, args.concurrent, args.new_tokens, args.waste_requests = (
            500,
            1,
            4,
            16,
            16,
        )
    if args.threads:
        torch.set_num_threads(args.threads)
    load = os.getloadavg()[0]
    engine = LLMEngine.from_model(
        None,
        num_kv_blocks=2048,
        max_num_seqs=64,
        max_num_batched_tokens=2048,
        num_threads=args.threads,
    )  # None: the engine's auto choice
    print(
        f"# engine_cpu: torch {torch.__version__}, {torch.get_num_threads()} threads, "
        f"{os.cpu_count()} CPUs, load average {load:.1f}, {time.strftime('%Y-%m-%d')}"
    )
    if args.steps_only:
        cold, per_step = bench_steps(engine)
        print(
            "| threads | cold 1,200-token prefill (s) | decode step, batch 1 (ms) | decode step, batch 8 (ms) |"
        )
        print("|---|---:|---:|---:|")
        print(
            f"| {torch.get_num_threads()} | {cold:.2f} | {per_step[1] * 1e3:.0f} | {per_step[8] * 1e3:.0f} |"
        )
        return 0

    cold, cached, plen = bench_ttft(engine, args.prefix, args.reps)
    print(f"\n1. TTFT, {plen}-token prompt, {args.prefix}-token prefix (median of {args.reps})")
    print(
        f"| case | TTFT (s) |\n|---|---:|\n| cold (peer) | {cold:.3f} |\n| prefix cached | {cached:.3f} |"
    )
    print(f"cached / cold = {cached / cold:.1%} (target <= 10%)")

    from transformers import AutoModelForCausalLM

    gguf = Path(engine.model_path)
    hf = AutoModelForCausalLM.from_pretrained(
        str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32
    ).eval()
    ours_tps, hf_tps, ot, os_, ht, hs = bench_throughput(
        engine, hf, args.concurrent, args.new_tokens
    )
    print(
        f"\n2. Output tokens/s, {args.concurrent} requests x {args.new_tokens} new tokens (greedy)"
    )
    print("| system | tokens | seconds | tokens/s |\n|---|---:|---:|---:|")
    print(f"| local_engine, {args.concurrent} concurrent | {ot} | {os_:.1f} | {ours_tps:.1f} |")
    print(f"| transformers generate, one after another (peer) | {ht} | {hs:.1f} | {hf_tps:.1f} |")
    print(f"ratio = {ours_tps / hf_tps:.1f}x (target >= 4x)")
    del hf

    mean_w, max_w, peak, static_w = bench_waste(engine, args.waste_requests, seed=7)
    print(
        f"\n3. KV waste, {args.waste_requests} concurrent requests, prompts 20-400 tokens, 8-48 new"
        " (allocated slots not holding a token / allocated, sampled after every step)"
    )
    print("| allocator | waste |\n|---|---:|")
    print(f"| paged, 16-token blocks: mean over steps | {mean_w:.2%} |")
    print(f"| paged: worst step | {max_w:.2%} |")
    print(
        f"| paged at peak concurrency ({peak[0]} seqs, {peak[1]} slots) | {(peak[1] - peak[2]) / peak[1]:.2%} |"
    )
    print(
        f"| contiguous per request, prompt + max_tokens reserved (peer): mean over steps | {static_w:.2%} |"
    )
    print(f"paged / contiguous = {mean_w / static_w:.2f} (target: paged < 4%)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
