"""Time to first token of a prefix-cache hit on a CUDA GPU, against its GPU time and a cold
request (issue 13).

Llama-3-8B's shape (``bench/engine_gpu.py``'s ``llama3-8b-shape`` folder: 32 layers, 4096 wide,
32/8 heads of 128, vocab 128,256), random weights, bf16, Triton attention. One engine; every
measurement runs twice in the same process, in two modes:

- ``eager``: prefill and mixed steps run eagerly (``runner.prefill_graphs = None``: the engine
  before issue 13; decode steps replay their graphs in both modes);
- ``graphs``: prefill and mixed steps of at most ``prefill_graph_max_tokens`` tokens replay the
  :class:`~local_engine.cuda_graphs.PrefillGraphRunner`'s graphs.

Per mode (each request greedy, ``max_tokens=1``, a fresh random suffix so that only the prefix
hits), the timings first (the torch profiler, once run, slows later launches):

- **warm TTFT**: a ``--prefix``-token prefix (default 4,000) is in the prefix cache; a request of
  that prefix plus ``--new`` new tokens (default 100) is added and the engine stepped until its
  first token: wall time from ``add_request`` to the output (median of ``--repeats``, default 7,
  after one untimed request); measured again after both modes ("2nd round");
- **cold TTFT**: a fresh random ``prefix + new``-token prompt (nothing cached), the same way;
- **host breakdown** of the warm step (separate requests, median of ``--repeats``): schedule,
  prepare, forward (synchronised), sample and the rest of the step, and the host time until
  the forward returns;

then a sweep of warm TTFT over new-token counts (``--sweep``, median of 5, both modes), then
greedy continuations in both modes (12 tokens of 4 prefix hits submitted together: chunks
mixed with decodes; compared token by token, a divergence reported with its eager top-2
margin); then per mode:

- **GPU time of the warm step**: the sum of the device time of every kernel and copy that
  torch.profiler records over one warm request's step (median of 3 requests), and in
  ``graphs`` mode also the replayed graph alone timed with CUDA events (median of 10 replays
  over the last warm step's inputs);
- a cProfile of 3 warm requests (``OUT/cprofile_MODE.txt``);
- in ``graphs`` mode, correctness against eager on the same batches (:meth:`Bench.check`): warm
  steps with 17..480 new tokens and steps mixing prefix hits' chunks with decodes.

Results go to ``OUT/prefix_hit_gpu.json`` (and the log to stdout); the table is printed last.

Usage (on the GPU machine; the folder written here by ``bench/engine_gpu.py prepare``)::

    python3 bench/prefix_hit_gpu.py --dir build/bench_models --out $OUT
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

MODEL = "llama3-8b-shape"


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


class Bench:
    def __init__(self, engine, torch, args):
        self.engine = engine
        self.torch = torch
        self.args = args
        self.vocab = engine.model_config.vocab_size
        self.g = torch.Generator().manual_seed(1234)
        self.prefix = self.rand(args.prefix)
        self.n = 0

    def rand(self, k: int) -> list[int]:
        return self.torch.randint(10, self.vocab - 10, (k,), generator=self.g).tolist()

    def ttft(self, prompt: list[int], logprobs=None) -> tuple[float, object]:
        """Seconds from add_request to the step that returns the first token; the output."""
        from local_engine import SamplingParams

        eng = self.engine
        self.n += 1
        rid = f"q{self.n}"
        params = SamplingParams(temperature=0.0, max_tokens=1, ignore_eos=True, logprobs=logprobs)
        t0 = time.perf_counter()
        eng.add_request(rid, prompt, params)
        while True:
            outs = eng.step()
            for o in outs:
                if o.request_id == rid and o.outputs[0].token_ids:
                    t = time.perf_counter() - t0
                    while eng.has_unfinished_requests():
                        eng.step()
                    return t, o

    def warm_prompt(self, new: int | None = None) -> list[int]:
        return self.prefix + self.rand(self.args.new if new is None else new)

    def warm_ttft(self, new: int | None = None, repeats: int | None = None) -> dict:
        self.ttft(self.warm_prompt(new))  # untimed
        ts, cached = [], []
        for _ in range(repeats or self.args.repeats):
            t, o = self.ttft(self.warm_prompt(new))
            ts.append(t)
            cached.append(o.num_cached_tokens)
        return dict(ms=statistics.median(ts) * 1e3, all_ms=[x * 1e3 for x in ts], cached=cached)

    def cold_ttft(self) -> dict:
        n = self.args.prefix + self.args.new
        self.ttft(self.rand(n))
        ts, cached = [], []
        for _ in range(self.args.repeats):
            t, o = self.ttft(self.rand(n))
            ts.append(t)
            cached.append(o.num_cached_tokens)
        return dict(ms=statistics.median(ts) * 1e3, all_ms=[x * 1e3 for x in ts], cached=cached)

    def gpu_time(self) -> dict:
        """Device time of the kernels (and copies) of one warm step, by torch.profiler."""
        from torch.profiler import ProfilerActivity, profile

        torch = self.torch
        eng = self.engine
        runner = eng.runner
        per, launches = [], []
        for _ in range(3):
            captured = {}
            orig = runner.forward_logits

            def fwd(batch, orig=orig, captured=captured):
                torch.cuda.synchronize()
                acts = [
                    ProfilerActivity.CUDA if torch.cuda.is_available() else ProfilerActivity.CPU
                ]
                with profile(activities=acts) as prof:
                    out = orig(batch)
                    torch.cuda.synchronize()
                captured["prof"] = prof
                return out

            runner.forward_logits = fwd
            try:
                self.ttft(self.warm_prompt())
            finally:
                runner.forward_logits = orig
            us, n = 0.0, 0
            top = []
            for e in captured["prof"].key_averages():
                t = getattr(e, "self_device_time_total", None)
                if t is None:
                    t = getattr(e, "self_cuda_time_total", 0)
                # device rows: kernels and copies (aten:: rows repeat their kernels' time)
                if t and (not e.key.startswith(("aten::", "cuda")) or "Memcpy" in e.key):
                    us += t
                    n += e.count
                    top.append((round(t, 1), e.count, e.key[:80]))
            per.append(us / 1e3)
            launches.append(n)
        top.sort(reverse=True)
        row = dict(
            profiler_ms=statistics.median(per), all_ms=per, device_ops=launches, top_us=top[:14]
        )
        pg = runner.prefill_graphs
        if pg is not None and torch.cuda.is_available():
            from local_engine.cuda_graphs import choose_prefill_shape

            shape = choose_prefill_shape(pg.shapes, self.args.new, 1)
            replay = pg.graphs[shape]
            ts = []
            for _ in range(10):
                a = torch.cuda.Event(enable_timing=True)
                z = torch.cuda.Event(enable_timing=True)
                a.record()
                replay()
                z.record()
                z.synchronize()
                ts.append(a.elapsed_time(z))
            row["graph_replay_ms"] = statistics.median(ts)
            row["graph_shape"] = shape
        return row

    def breakdown(self) -> dict:
        """Host phases of the warm step (forward synchronised), medians over repeats."""
        torch = self.torch
        eng = self.engine
        runner, sched = eng.runner, eng.scheduler
        phases = {"schedule": [], "prepare": [], "forward": [], "forward_cpu": [], "sample": []}
        steps = []
        cur = {}
        wrapped = []

        def wrap(obj, name, key, sync=False):
            orig = getattr(obj, name)

            def f(*a, **k):
                if sync:
                    torch.cuda.synchronize()
                t0 = time.perf_counter()
                out = orig(*a, **k)
                if sync:
                    cur["forward_cpu"] = time.perf_counter() - t0
                    torch.cuda.synchronize()
                cur[key] = time.perf_counter() - t0
                return out

            setattr(obj, name, f)
            wrapped.append((obj, name, orig))

        wrap(sched, "schedule", "schedule")
        wrap(runner, "prepare", "prepare")
        wrap(runner, "forward_logits", "forward", sync=True)
        wrap(runner, "sample", "sample")
        orig_step = eng.step

        def step():
            cur.clear()
            t0 = time.perf_counter()
            out = orig_step()
            cur["step"] = time.perf_counter() - t0
            if "forward" in cur and runner_batch_is_warm[0]:
                steps.append(dict(cur))
            return out

        runner_batch_is_warm = [False]
        eng.step = step
        try:
            self.ttft(self.warm_prompt())
            for _ in range(self.args.repeats):
                runner_batch_is_warm[0] = True
                from local_engine import SamplingParams

                self.n += 1
                eng.add_request(
                    f"b{self.n}",
                    self.warm_prompt(),
                    SamplingParams(temperature=0.0, max_tokens=1, ignore_eos=True),
                )
                eng.step()  # the warm step (prefill of the new tokens, samples the first)
                runner_batch_is_warm[0] = False
                while eng.has_unfinished_requests():
                    eng.step()
        finally:
            eng.step = orig_step
            for obj, name, orig in wrapped:
                setattr(obj, name, orig)
        row = {}
        for k in list(phases) + ["step"]:
            vals = [s[k] for s in steps if k in s]
            row[k + "_ms"] = statistics.median(vals) * 1e3 if vals else None
        row["rest_ms"] = row["step_ms"] - sum(
            row[k + "_ms"] or 0.0 for k in ("schedule", "prepare", "forward", "sample")
        )
        return row

    def cprofile(self) -> str:
        pr = cProfile.Profile()
        self.ttft(self.warm_prompt())
        pr.enable()
        for _ in range(3):
            self.ttft(self.warm_prompt())
        pr.disable()
        s = io.StringIO()
        pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(18)
        return s.getvalue()

    def check(self) -> dict:
        """Graph vs eager logits on the same batches (graphs mode only). Each step a graph
        takes runs three times: eagerly as before (``eager``: its real tokens), eagerly over
        the graph's padded input buffer (``padded``: the same kernels the graph captured) and
        replayed (``graph``). ``graph`` must equal ``padded`` (rel. error <= 1e-3: capture
        and padding add nothing); against ``eager`` the difference is the GEMMs' dependence
        on the padded row count in bf16, reported with the argmax flips, each a near-tie
        unless its eager top-2 margin is above 4x the RMS logit deviation of its row."""
        torch = self.torch
        eng = self.engine
        runner = eng.runner
        pg = runner.prefill_graphs
        orig = runner.forward_logits
        rows = []

        def rel(a, b):
            return ((a - b).norm() / b.norm().clamp_min(1e-30)).item()

        def both(batch):
            shape = batch.graph_shape
            if shape is None:
                return orig(batch)
            runner.prefill_graphs = None
            ref = orig(batch).clone()
            runner.prefill_graphs = pg
            replay = pg.graphs[shape]
            pg.graphs[shape] = lambda: pg._forward(*shape)
            try:
                padded = orig(batch).clone()
            finally:
                pg.graphs[shape] = replay
            out = orig(batch)
            if ref.shape[0] == 0:
                return out
            dev = out - ref
            rms = dev.pow(2).mean(-1).sqrt()
            top2 = ref.topk(2, dim=-1).values
            margin = top2[:, 0] - top2[:, 1]
            same = (out.argmax(-1) == ref.argmax(-1)).tolist()
            tie = (margin <= 4 * rms).tolist()
            rows.append(
                dict(
                    tokens=int(batch.input_ids.shape[0]),
                    seqs=batch.meta.num_seqs,
                    shape=list(shape),
                    graph_vs_padded=rel(out, padded),
                    graph_vs_eager=rel(out, ref),
                    rows=len(same),
                    argmax_same=sum(same),
                    near_ties=sum(1 for s, t in zip(same, tie) if not s and t),
                    bad=sum(1 for s, t in zip(same, tie) if not s and not t),
                    margins_of_flips=[round(m, 3) for s, m in zip(same, margin.tolist()) if not s],
                    rms_dev=round(rms.max().item(), 4),
                    finite=bool(torch.isfinite(out).all()),
                )
            )
            return out

        from local_engine import SamplingParams

        runner.forward_logits = both
        try:
            for new in (100, 1 + 16, 37, 250, 480, 100, 64):
                self.ttft(self.warm_prompt(new))
            # mixed: prefix hits and short prompts arriving while others decode
            p = SamplingParams(temperature=0.0, max_tokens=6, ignore_eos=True)
            for i in range(4):
                self.n += 1
                eng.add_request(f"m{self.n}", self.warm_prompt(20 + 30 * i), p)
                eng.add_request(f"s{self.n}", self.rand(9 + i), p)
                eng.step()
            while eng.has_unfinished_requests():
                eng.step()
        finally:
            runner.forward_logits = orig
        ok = bool(rows) and all(
            r["graph_vs_padded"] <= 1e-3 and r["bad"] == 0 and r["finite"] for r in rows
        )
        return dict(passed=ok, steps=rows)

    def greedy(self, mode: str, prompts) -> list:
        """Greedy continuations (12 tokens, top-2 logprobs) of ``prompts``, all submitted at
        once (prefill chunks mixed with decodes), under a cache salt of this mode (so the
        modes share no cached blocks but each request after the first hits the prefix)."""
        from local_engine import SamplingParams

        eng = self.engine
        p = SamplingParams(temperature=0.0, max_tokens=12, ignore_eos=True, logprobs=2)
        eng.add_request(f"g{mode}-first", prompts[0], p, cache_salt=mode)
        while eng.has_unfinished_requests():
            eng.step()
        for i, pr in enumerate(prompts[1:]):
            eng.add_request(f"g{mode}{i}", pr, p, cache_salt=mode)
        outs = {}
        while eng.has_unfinished_requests():
            for o in eng.step():
                if o.finished:
                    outs[o.request_id] = o.outputs[0]
        return [outs[f"g{mode}{i}"] for i in range(len(prompts) - 1)]

    def forward_cpu(self) -> dict:
        """The warm step's host time until its forward returns (the GPU idle before it)."""
        torch = self.torch
        runner = self.engine.runner
        orig = runner.forward_logits
        cpu = []

        def f(batch):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            out = orig(batch)
            cpu.append(time.perf_counter() - t0)
            torch.cuda.synchronize()
            return out

        runner.forward_logits = f
        try:
            for _ in range(self.args.repeats):
                self.ttft(self.warm_prompt())
        finally:
            runner.forward_logits = orig
        return dict(forward_cpu_ms=statistics.median(cpu) * 1e3)


def _cpu_stand_ins(torch) -> None:
    """For --cpu-dry-run: CUDA synchronisation as a no-op."""
    torch.cuda.synchronize = lambda *a, **k: None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", type=Path, required=True, help="folder holding llama3-8b-shape/")
    ap.add_argument("--out", type=Path, default=Path("."), help="where the JSON goes")
    ap.add_argument("--prefix", type=int, default=4000, help="cached prefix tokens (4000)")
    ap.add_argument("--new", type=int, default=100, help="new tokens of the warm request (100)")
    ap.add_argument("--repeats", type=int, default=7, help="timed requests per median (7)")
    ap.add_argument("--modes", default="eager,graphs", help="eager,graphs")
    ap.add_argument("--max-tokens", type=int, default=512, help="prefill_graph_max_tokens")
    ap.add_argument(
        "--sweep",
        default="17,64,65,130,256,300,512",
        help="new-token counts of a warm-TTFT sweep over the buckets (median of 5 each, "
        "both modes; empty = none)",
    )
    ap.add_argument(
        "--cpu-dry-run",
        action="store_true",
        help="run the script's logic on the CPU with --dir's smollm2-135m folder, the graphs "
        "replaced by re-running the forward over their buffers (numbers meaningless)",
    )
    args = ap.parse_args(argv)
    import torch

    if args.cpu_dry_run:
        _cpu_stand_ins(torch)

    from local_engine.engine import LLMEngine

    args.out.mkdir(parents=True, exist_ok=True)
    res: dict = dict(
        started=time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        gpu=torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu",
        torch=torch.__version__,
        args={k: str(v) for k, v in vars(args).items()},
    )
    t0 = time.time()
    engine = LLMEngine.from_config(
        args.dir / (MODEL if not args.cpu_dry_run else "smollm2-135m"),
        device="cuda" if not args.cpu_dry_run else "cpu",
        max_model_len=8192,
        max_num_batched_tokens=8192,
        gpu_memory_utilization=0.5,
        prefill_graph_max_tokens=args.max_tokens,
    )
    if args.cpu_dry_run:
        from local_engine.cuda_graphs import PrefillGraphRunner

        class Rerun(PrefillGraphRunner):
            def _capture_one(self, shape, pool):
                return lambda: self._forward(*shape)

        r = engine.runner
        r.prefill_graphs = Rerun(
            r.model,
            r.kv_caches,
            max_tokens=args.max_tokens,
            max_seqs=4,
            max_blocks_per_seq=8192 // 16,
            require_cuda=False,
        ).capture()
    pg = engine.runner.prefill_graphs
    res["setup"] = dict(
        build_s=time.time() - t0,
        decode_capture_s=engine.runner.graphs.capture_seconds if engine.runner.graphs else None,
        prefill_capture_s=pg.capture_seconds if pg else None,
        prefill_shapes=len(pg.shapes) if pg else 0,
        prefill_capture_mib=pg.capture_bytes / 2**20 if pg else None,
        mem_reserved_gib=torch.cuda.memory_reserved() / 2**30 if torch.cuda.is_available() else 0,
        kv_blocks=engine.kv_cache_manager.num_blocks,
    )
    log(f"setup {res['setup']}")
    b = Bench(engine, torch, args)
    b.ttft(b.prefix + b.rand(5))  # caches the prefix (250 blocks); compiles the kernels
    b.ttft(b.rand(300))
    out_path = args.out / "prefix_hit_gpu.json"

    def save():
        out_path.write_text(json.dumps(res, indent=1, default=str))

    modes = args.modes.split(",")
    for mode in modes:  # timings first: the profiler slows later launches
        engine.runner.prefill_graphs = pg if mode == "graphs" else None
        r = res.setdefault(mode, {})
        r["warm"] = b.warm_ttft()
        log(f"{mode} warm TTFT {r['warm']}")
        r["cold"] = b.cold_ttft()
        log(f"{mode} cold TTFT {r['cold']}")
        r["breakdown"] = b.breakdown()
        log(f"{mode} warm-step host breakdown {r['breakdown']}")
        r["profile"] = b.forward_cpu()
        log(f"{mode} forward CPU {r['profile']}")
        save()
    for mode in modes:  # a second round of warm TTFT, the modes' order reversed
        engine.runner.prefill_graphs = pg if mode == "graphs" else None
        res[mode]["warm2"] = b.warm_ttft()
        log(f"{mode} warm TTFT (2nd round) {res[mode]['warm2']}")
    sweep = [int(x) for x in args.sweep.split(",") if x]
    for mode in modes if sweep else ():
        engine.runner.prefill_graphs = pg if mode == "graphs" else None
        res[mode]["sweep"] = {k: b.warm_ttft(k, repeats=5)["ms"] for k in sweep}
        log(f"{mode} warm TTFT by new tokens {res[mode]['sweep']}")
    save()
    if pg is not None and "graphs" in modes and "eager" in modes:
        prompts = [b.prefix + b.rand(5)] + [b.warm_prompt(k) for k in (100, 37, 250, 9)]
        gre = {}
        for mode in ("eager", "graphs"):
            engine.runner.prefill_graphs = pg if mode == "graphs" else None
            gre[mode] = b.greedy(mode, prompts)
        same, firsts = 0, []
        for e, g in zip(gre["eager"], gre["graphs"]):
            if e.token_ids == g.token_ids:
                same += 1
                continue
            j = next(i for i, (x, y) in enumerate(zip(e.token_ids, g.token_ids)) if x != y)
            top = sorted(e.logprobs[j].values(), reverse=True)
            firsts.append(dict(position=j, eager_top2_margin=top[0] - top[1]))
        res["greedy"] = dict(sequences=len(gre["eager"]), identical=same, divergences=firsts)
        log(f"greedy eager vs graphs: {res['greedy']}")
        save()
    for mode in modes:
        engine.runner.prefill_graphs = pg if mode == "graphs" else None
        r = res[mode]
        r["gpu"] = b.gpu_time()
        log(f"{mode} warm-step GPU {r['gpu']}")
        prof = b.cprofile()
        (args.out / f"cprofile_{mode}.txt").write_text(prof)
        print(prof[:2000], flush=True)
        if mode == "graphs" and pg is not None:
            r["check"] = b.check()
            log(f"check passed={r['check']['passed']}")
            for row in r["check"]["steps"]:
                print("   ", row, flush=True)
        save()
    engine.runner.prefill_graphs = pg

    print(
        "\n| mode | warm TTFT ms (2nd round) | warm step GPU ms: profiler / graph replay | "
        "TTFT / GPU | forward host ms | cold TTFT ms | warm / cold |"
    )
    print("|---|---|---|---|---|---|---|")
    for mode in modes:
        r = res.get(mode)
        if not r:
            continue
        w, w2, c = r["warm"]["ms"], r["warm2"]["ms"], r["cold"]["ms"]
        g = r["gpu"]["profiler_ms"]
        gr = r["gpu"].get("graph_replay_ms")
        gpu = f"{g:.2f}" + (f" / {gr:.2f}" if gr else "")
        ratio = f"{w / g:.2f}" if g else "-"
        fc = r["profile"]["forward_cpu_ms"]
        print(
            f"| {mode} | {w:.2f} ({w2:.2f}) | {gpu} | {ratio} | {fc:.2f} | {c:.1f} | {w / c:.3f} |"
        )
    for mode in modes:
        r = res.get(mode)
        if r:
            bd = r["breakdown"]
            print(
                f"{mode} warm step: "
                + ", ".join(f"{k[:-3]} {v:.2f}" for k, v in bd.items() if v is not None)
                + " ms"
            )
    if sweep and all("sweep" in res[m] for m in modes):
        print("\n| new tokens | " + " | ".join(f"{m} warm TTFT ms" for m in modes) + " |")
        print("|---" * (len(modes) + 1) + "|")
        for k in sweep:
            print(f"| {k} | " + " | ".join(f"{res[m]['sweep'][k]:.2f}" for m in modes) + " |")
    if "greedy" in res:
        print(f"greedy eager vs graphs: {res['greedy']}")
    if "graphs" in res and "check" in res["graphs"]:
        print(f"graph vs eager check passed: {res['graphs']['check']['passed']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
