"""Paged-attention kernels on the GPU: correctness first, then timing against torch SDPA.

Usage (on a CUDA machine; see bench/RESULTS.md "## triton" for recorded runs):

    python bench/kernels.py [--sweep] [--split-grid] [--out DIR]

Steps, in this order, in one process:

1. Correctness of the compiled kernels: random ragged batches (prefill over a cached prefix,
   chunked prefill, decode, single-token and one-block contexts, block tables in random order,
   fp32/bf16/fp16, head_dim 64/128, block_size 16/32, forced split-K) against the torch
   reference and against dense float64 attention; outputs are poisoned (NaN) first; the KV write
   kernel against the reference write. Any failure stops the script (exit 1) before timing.
2. ``--sweep``: each tile configuration on each benchmark shape (decode and prefill), and the
   split-K segment counts on the decode shapes.
3. ``--split-grid``: decode time against the split-K segment count over a grid of batch sizes and
   context lengths (the data behind ``choose_num_segments``).
4. The table: for each shape, the Triton kernel with its default choices, torch SDPA on
   contiguous caches (``enable_gqa=True``), and a naive gather-into-contiguous then SDPA.
   Decode rows report TB/s of KV bytes read (K and V, each context token once); prefill rows
   report TFLOP/s of the causal work (4 * head_dim FLOPs per query-key pair per head).

Times are medians of CUDA-graph replays (10 calls per replay), so Python launch overhead is
out of every number, the peers' included.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from local_engine.attention import torch_ref  # noqa: E402
from local_engine.attention import triton_backend as tb  # noqa: E402
from local_engine.attention.triton_backend import KernelConfig  # noqa: E402

H, HKV, D, BS, DT = 32, 8, 128, 16, torch.bfloat16
DECODE_SHAPES = [(64, 4096), (256, 1024), (16, 32768)]
PREFILL_SHAPE = (8, 512, 4096)  # seqs, new tokens, cached prefix

LOG: list = []


def log(msg: str = "") -> None:
    print(msg, flush=True)
    LOG.append(msg)


# ----------------------------------------------------------------------------- inputs


def make_paged(
    ctx_lens,
    num_kv_heads,
    head_dim,
    block_size,
    dtype,
    device,
    g,
    extra_blocks=4,
    fill=None,
    shuffle=True,
):
    """A pool holding each sequence's K/V in shuffled blocks (``shuffle=False``: in order);
    returns caches, block table."""
    n_blocks = [-(-c // block_size) for c in ctx_lens]
    num_blocks = sum(n_blocks) + extra_blocks
    shape = (num_blocks, block_size, num_kv_heads, head_dim)
    if fill is None:
        k_cache = torch.randn(shape, generator=g, device=device, dtype=torch.float32).to(dtype)
        v_cache = torch.randn(shape, generator=g, device=device, dtype=torch.float32).to(dtype)
    else:
        k_cache = torch.full(shape, fill, device=device, dtype=dtype)
        v_cache = torch.full(shape, fill, device=device, dtype=dtype)
    if shuffle:
        perm = torch.randperm(num_blocks, generator=g, device=device).to(torch.int32)
    else:
        perm = torch.arange(num_blocks, device=device, dtype=torch.int32)
    width = max(n_blocks)
    bt = torch.full((len(ctx_lens), width), num_blocks + 10_000, dtype=torch.int32, device=device)
    used = 0
    for i, n in enumerate(n_blocks):
        bt[i, :n] = perm[used : used + n]
        used += n
    return k_cache, v_cache, bt


def dense_from_paged(k_cache, bt, ctx):
    nb = -(-ctx // k_cache.shape[1])
    return k_cache[bt[:nb].long()].reshape(-1, *k_cache.shape[2:])[:ctx]


def dense_attention_f64(q, k_cache, v_cache, bt, cu, lens, scale):
    out = torch.zeros(q.shape, dtype=torch.float64, device=q.device)
    group = q.shape[1] // k_cache.shape[2]
    for i, c in enumerate(lens):
        s, e = cu[i], cu[i + 1]
        ql = e - s
        if ql == 0:
            continue
        k = dense_from_paged(k_cache, bt[i], c).double().repeat_interleave(group, 1)
        v = dense_from_paged(v_cache, bt[i], c).double().repeat_interleave(group, 1)
        sc = torch.einsum("qhd,khd->hqk", q[s:e].double(), k) * scale
        qpos = torch.arange(c - ql, c, device=q.device)[:, None]
        kpos = torch.arange(c, device=q.device)[None, :]
        sc.masked_fill_((kpos > qpos)[None], float("-inf"))
        out[s:e] = torch.einsum("hqk,khd->qhd", torch.softmax(sc, -1), v)
    return out


def rel_err(a, b):
    return ((a.double() - b.double()).norm() / b.double().norm()).item()


# ----------------------------------------------------------------------------- 1. correctness


def check_correctness(device, quick: bool = False) -> bool:
    log("## correctness (compiled kernels vs torch_ref and dense float64)")
    tol = {torch.float32: 1e-3, torch.bfloat16: 2e-2, torch.float16: 1e-2}
    seed = int.from_bytes(os.urandom(4), "little")
    g = torch.Generator(device=device).manual_seed(seed)
    import random

    rng = random.Random(seed)
    log(f"seed {seed}")
    orig_alloc = tb._alloc
    tb._alloc = lambda shape, dtype, dev: torch.full(shape, float("nan"), dtype=dtype, device=dev)
    ok = True
    n_cases = 0
    try:
        cases = []
        for dtype in (torch.float32, torch.bfloat16, torch.float16):
            for head_dim in (64, 128):
                for bs in (16, 32):
                    for mode in ("mixed", "decode", "split"):
                        if (
                            quick
                            and dtype != torch.bfloat16
                            and (head_dim, bs, mode) != (128, 16, "mixed")
                        ):
                            continue
                        cases.append((dtype, head_dim, bs, mode))
        for heads in ((4, 4), (12, 4), (8, 1), (32, 8)):
            cases.append((torch.bfloat16, 128, 16, ("gqa", heads)))
        for dtype, head_dim, bs, mode in cases:
            heads = (8, 2)
            if isinstance(mode, tuple):
                heads, mode = mode[1], mode[0]
            if mode in ("mixed", "gqa"):
                ctx = [bs + 7, 2 * bs + 5, 1, bs, 3 * bs + 1, 9, 700, 300]
                ql = [bs + 7, bs, 1, 1, 2, 9, 200, 1]
            else:
                ctx = [rng.randint(1, 3000) for _ in range(rng.randint(1, 12))] + [1, bs]
                ql = [1] * len(ctx)
            nseg = rng.choice([2, 3, 7, 16]) if mode == "split" else None
            k_cache, v_cache, bt = make_paged(ctx, heads[1], head_dim, bs, dtype, device, g)
            cu = [0]
            for x in ql:
                cu.append(cu[-1] + x)
            q = torch.randn(cu[-1], heads[0], head_dim, generator=g, device=device).to(dtype)
            cu_t = torch.tensor(cu, dtype=torch.int32, device=device)
            sl = torch.tensor(ctx, dtype=torch.int32, device=device)
            out = tb.paged_attention(q, k_cache, v_cache, bt, cu_t, sl, num_segments=nseg)
            if device.type == "cuda":
                torch.cuda.synchronize()
            ref = torch_ref.paged_attention(q, k_cache, v_cache, bt, cu_t, sl)
            dense = dense_attention_f64(q, k_cache, v_cache, bt, cu, ctx, head_dim**-0.5)
            e1, e2 = rel_err(out, ref), rel_err(out, dense)
            nan = bool(torch.isnan(out).any())
            good = (not nan) and e1 <= tol[dtype] and e2 <= tol[dtype]
            n_cases += 1
            if not good:
                ok = False
                log(
                    f"FAIL {dtype} d={head_dim} bs={bs} {mode} heads={heads} nseg={nseg} "
                    f"err_ref={e1:.2e} err_dense={e2:.2e} nan={nan}"
                )
        # KV write
        for dtype in (torch.float32, torch.bfloat16):
            n, hkv, hd, bs = 300, 8, 128, 16
            kc = torch.full((64, bs, hkv, hd), float("nan"), dtype=dtype, device=device)
            vc = kc.clone()
            slots = torch.randperm(64 * bs, generator=g, device=device)[:n]
            slots[::7] = -1
            key = torch.randn(n, hkv, hd, generator=g, device=device).to(dtype)
            val = torch.randn(n, hkv, 2 * hd, generator=g, device=device).to(dtype)[..., :hd]
            tb.write_kv_cache(key, val, kc, vc, slots)
            kr, vr = torch.full_like(kc, float("nan")), torch.full_like(vc, float("nan"))
            torch_ref.write_kv_cache(key, val, kr, vr, slots)
            same = torch.equal(kc.nan_to_num(), kr.nan_to_num()) and torch.equal(
                vc.nan_to_num(), vr.nan_to_num()
            )
            n_cases += 1
            if not same:
                ok = False
                log(f"FAIL write_kv_cache {dtype}")
    finally:
        tb._alloc = orig_alloc
    log(f"{n_cases} cases: {'all passed' if ok else 'FAILURES'}")
    return ok


# ----------------------------------------------------------------------------- timing


def capture(fn, inner=10):
    """A replay of ``inner`` calls of ``fn`` (one CUDA graph; eager calls if capture fails)."""
    fn()
    torch.cuda.synchronize()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(2):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    try:
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(inner):
                fn()
        run = graph.replay
    except Exception as exc:  # noqa: BLE001 - report and time eagerly instead
        log(f"  (graph capture failed: {type(exc).__name__}: {exc}; timing eagerly)")
        torch.cuda.synchronize()

        def run():
            for _ in range(inner):
                fn()

    # warm-up: replay for WARMUP_MS of GPU time before anything is timed (as
    # triton.testing.do_bench's 25 ms). Session 7: without it the first timing of a fresh graph
    # of three 1 x 32k sweep rows read 0.88-0.90 of SDPA in every whole sweep while the same
    # graph timed again at once read 0.99-1.01 (bench/RESULTS.md "## kvquant").
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    run()
    b.record()
    b.synchronize()
    for _ in range(min(1000, int(WARMUP_MS / max(a.elapsed_time(b), 1e-3)))):
        run()
    torch.cuda.synchronize()
    return run


#: GPU time (ms) a captured replay runs before it is timed (:func:`capture`).
WARMUP_MS = 25.0


def time_replays(run, inner=10, reps=15):
    """Median ms per call of ``reps`` timed runs of ``run`` (``inner`` calls each)."""
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        run()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) / inner)
    return statistics.median(times)


def bench(fn, inner=10, reps=15, keep=None):
    """Median ms per call over CUDA-graph replays of ``inner`` calls (falls back to eager);
    ``keep`` (a list) receives the replay, to time it again later (:func:`time_replays`)."""
    run = capture(fn, inner)
    if keep is not None:
        keep.append(run)
    return time_replays(run, inner, reps)


class DecodeProblem:
    def __init__(self, batch, ctx, device, g, block_size=BS, dtype=DT, table_width=None):
        self.batch, self.ctx = batch, ctx
        self.k_cache, self.v_cache, self.bt = make_paged(
            [ctx] * batch, HKV, D, block_size, dtype, device, g
        )
        if table_width is not None and table_width > self.bt.shape[1]:
            pad = torch.zeros(
                batch, table_width - self.bt.shape[1], dtype=torch.int32, device=device
            )
            self.bt = torch.cat([self.bt, pad], 1)
        self.q = torch.randn(batch, H, D, generator=g, device=device).to(dtype)
        self.cu = torch.arange(batch + 1, dtype=torch.int32, device=device)
        self.sl = torch.full((batch,), ctx, dtype=torch.int32, device=device)
        self.kv_bytes = 2 * batch * ctx * HKV * D * self.k_cache.element_size()

    def triton(self, **kw):
        return lambda: tb.paged_attention(
            self.q, self.k_cache, self.v_cache, self.bt, self.cu, self.sl, **kw
        )

    def contiguous(self):
        k = torch.stack(
            [dense_from_paged(self.k_cache, self.bt[i], self.ctx) for i in range(self.batch)]
        )
        v = torch.stack(
            [dense_from_paged(self.v_cache, self.bt[i], self.ctx) for i in range(self.batch)]
        )
        return k.transpose(1, 2).contiguous(), v.transpose(1, 2).contiguous()  # [B, Hkv, ctx, D]

    def sdpa(self, k, v):
        q4 = self.q[:, :, None, :]  # [B, H, 1, D]
        return lambda: F.scaled_dot_product_attention(q4, k, v, enable_gqa=True)

    def naive(self):
        nb = -(-self.ctx // self.k_cache.shape[1])
        q4 = self.q[:, :, None, :]

        def fn():
            idx = self.bt[:, :nb].long()
            k = self.k_cache[idx].reshape(self.batch, -1, HKV, D)[:, : self.ctx].transpose(1, 2)
            v = self.v_cache[idx].reshape(self.batch, -1, HKV, D)[:, : self.ctx].transpose(1, 2)
            return F.scaled_dot_product_attention(q4, k, v, enable_gqa=True)

        return fn


class PrefillProblem:
    def __init__(self, seqs, new, prefix, device, g, dtype=DT):
        self.seqs, self.new, self.prefix = seqs, new, prefix
        self.ctx = prefix + new
        self.k_cache, self.v_cache, self.bt = make_paged(
            [self.ctx] * seqs, HKV, D, BS, dtype, device, g
        )
        self.q = torch.randn(seqs * new, H, D, generator=g, device=device).to(dtype)
        self.cu = torch.arange(0, seqs * new + 1, new, dtype=torch.int32, device=device)
        self.sl = torch.full((seqs,), self.ctx, dtype=torch.int32, device=device)
        pairs = new * prefix + new * (new + 1) // 2
        self.flops = 4 * D * H * seqs * pairs
        self.kv_bytes = 2 * seqs * self.ctx * HKV * D * self.k_cache.element_size()
        qpos = torch.arange(prefix, self.ctx, device=device)[:, None]
        kpos = torch.arange(self.ctx, device=device)[None, :]
        self.mask = kpos <= qpos  # [new, ctx], True = attend

    def triton(self, **kw):
        return lambda: tb.paged_attention(
            self.q, self.k_cache, self.v_cache, self.bt, self.cu, self.sl, **kw
        )

    def q4(self):
        return self.q.view(self.seqs, self.new, H, D).transpose(1, 2)  # [B, H, new, D]

    def contiguous(self, expand=False):
        k = torch.stack(
            [dense_from_paged(self.k_cache, self.bt[i], self.ctx) for i in range(self.seqs)]
        )
        v = torch.stack(
            [dense_from_paged(self.v_cache, self.bt[i], self.ctx) for i in range(self.seqs)]
        )
        k, v = k.transpose(1, 2), v.transpose(1, 2)
        if expand:
            k, v = k.repeat_interleave(H // HKV, 1), v.repeat_interleave(H // HKV, 1)
        return k.contiguous(), v.contiguous()

    def sdpa(self, k, v, gqa=True):
        q4 = self.q4().contiguous()
        return lambda: F.scaled_dot_product_attention(q4, k, v, attn_mask=self.mask, enable_gqa=gqa)

    def naive(self):
        nb = -(-self.ctx // self.k_cache.shape[1])
        q4 = self.q4()

        def fn():
            idx = self.bt[:, :nb].long()
            k = self.k_cache[idx].reshape(self.seqs, -1, HKV, D)[:, : self.ctx].transpose(1, 2)
            v = self.v_cache[idx].reshape(self.seqs, -1, HKV, D)[:, : self.ctx].transpose(1, 2)
            return F.scaled_dot_product_attention(q4, k, v, attn_mask=self.mask, enable_gqa=True)

        return fn


DECODE_SWEEP = [
    KernelConfig(16, 32, 2, 3),
    KernelConfig(16, 64, 4, 2),
    KernelConfig(16, 64, 4, 3),
    KernelConfig(16, 64, 4, 4),
    KernelConfig(16, 128, 4, 2),
    KernelConfig(16, 128, 4, 3),
    KernelConfig(16, 128, 8, 3),
    KernelConfig(16, 64, 2, 4),
]
PREFILL_SWEEP = [
    KernelConfig(64, 64, 4, 2),
    KernelConfig(64, 64, 4, 3),
    KernelConfig(128, 64, 4, 2),
    KernelConfig(128, 64, 8, 2),
    KernelConfig(128, 64, 8, 3),
    KernelConfig(128, 128, 8, 2),
    KernelConfig(128, 32, 4, 3),
    KernelConfig(64, 128, 4, 2),
    KernelConfig(128, 128, 8, 3),
]


def run_sweep(device, g, results):
    log("## sweep: decode configs (ms; best per shape marked *)")
    for batch, ctx in DECODE_SHAPES:
        p = DecodeProblem(batch, ctx, device, g)
        row = {}
        for cfg in DECODE_SWEEP:
            for nseg in (1, 2, 4, 8, 16):
                try:
                    row[(cfg, nseg)] = bench(
                        p.triton(config=cfg, num_segments=nseg), inner=5, reps=7
                    )
                except Exception as exc:  # noqa: BLE001
                    log(f"  {cfg} nseg={nseg}: {type(exc).__name__}: {str(exc)[:200]}")
        best = min(row, key=row.get)
        for (cfg, nseg), ms in sorted(row.items(), key=lambda kv: kv[1])[:6]:
            log(
                f"decode {batch}x{ctx} {cfg} nseg={nseg}: {ms:.4f} ms {p.kv_bytes / ms / 1e9:.2f} TB/s"
                + (" *" if (cfg, nseg) == best else "")
            )
        for nseg in (1, 2, 4, 8, 16):
            b = min((ms for (c, n), ms in row.items() if n == nseg), default=float("nan"))
            log(f"decode {batch}x{ctx} best over configs at nseg={nseg}: {b:.4f} ms")
        results.setdefault("sweep_decode", {})[f"{batch}x{ctx}"] = {
            f"{c.block_m},{c.tile_n},{c.num_warps},{c.num_stages}/{n}": ms
            for (c, n), ms in row.items()
        }
        del p
    log("## sweep: prefill configs")
    p = PrefillProblem(*PREFILL_SHAPE, device, g)
    row = {}
    for cfg in PREFILL_SWEEP:
        try:
            row[cfg] = bench(p.triton(config=cfg, num_segments=1), inner=5, reps=7)
        except Exception as exc:  # noqa: BLE001
            log(f"  {cfg}: {type(exc).__name__}: {str(exc)[:200]}")
    for cfg, ms in sorted(row.items(), key=lambda kv: kv[1]):
        log(f"prefill {cfg}: {ms:.4f} ms {p.flops / ms / 1e9:.1f} TFLOP/s")
    results["sweep_prefill"] = {
        f"{c.block_m},{c.tile_n},{c.num_warps},{c.num_stages}": ms for c, ms in row.items()
    }


def run_split_grid(device, g, results):
    log("## split-K grid: decode ms by segment count (32q/8kv, d=128, bf16, bs=16)")
    segs = (1, 2, 4, 8, 16, 32)
    log("batch  ctx    " + " ".join(f"{s:>8}" for s in segs) + "  best  rule")
    grid = {}
    sm = torch.cuda.get_device_properties(device).multi_processor_count
    for batch in (1, 2, 4, 8, 16, 32, 64, 128):
        for ctx in (1024, 4096, 16384, 32768):
            if batch * ctx > (1 << 21):
                continue
            p = DecodeProblem(batch, ctx, device, g)
            ms = [bench(p.triton(num_segments=s), inner=5, reps=5) for s in segs]
            best = segs[ms.index(min(ms))]
            # decode launches one program per token and KV head (the kernel's DECODE mode)
            cfg = tb.decode_config(D, H // HKV, 2, batch * HKV, sm)
            tile_bytes = tb.split_tile_bytes(cfg, D, 2, decode=True)
            rule = tb.choose_num_segments(batch * HKV, ctx, sm, cfg.tile_n, tile_bytes)
            grid[f"{batch}x{ctx}"] = dict(zip(map(str, segs), ms))
            log(
                f"{batch:>5} {ctx:>6} "
                + " ".join(f"{m:8.4f}" for m in ms)
                + f"  {best:>4}  {rule:>4}"
            )
            del p
    results["split_grid"] = grid


def run_table(device, g, results):
    rows = []
    log("## table")
    for batch, ctx in DECODE_SHAPES:
        p = DecodeProblem(batch, ctx, device, g)
        t_tri = bench(p.triton())
        k, v = p.contiguous()
        t_sdpa = bench(p.sdpa(k, v))
        del k, v
        t_naive = bench(p.naive(), inner=3, reps=7)
        rows.append(
            dict(
                kind="decode",
                shape=f"{batch} x {ctx}",
                triton=t_tri,
                sdpa=t_sdpa,
                naive=t_naive,
                kv_bytes=p.kv_bytes,
            )
        )
        del p
        torch.cuda.empty_cache()
    p = PrefillProblem(*PREFILL_SHAPE, device, g)
    t_tri = bench(p.triton())
    k, v = p.contiguous()
    t_sdpa = bench(p.sdpa(k, v))
    ke, ve = p.contiguous(expand=True)
    t_sdpa_x = bench(p.sdpa(ke, ve, gqa=False))
    del k, v
    t_naive = bench(p.naive(), inner=3, reps=7)
    # ceiling: flash-style causal square of the whole context, same heads
    qsq = torch.randn(p.seqs, H, p.ctx, D, generator=g, device=device).to(DT)
    t_sq = bench(lambda: F.scaled_dot_product_attention(qsq, ke, ve, is_causal=True))  # noqa: F821 (called before the del below)
    sq_flops = 4 * D * H * p.seqs * p.ctx * (p.ctx + 1) // 2
    del ke, ve, qsq
    rows.append(
        dict(
            kind="prefill",
            shape=f"{p.seqs} x {p.new} over {p.prefix}",
            triton=t_tri,
            sdpa=min(t_sdpa, t_sdpa_x),
            sdpa_gqa=t_sdpa,
            sdpa_expanded=t_sdpa_x,
            naive=t_naive,
            kv_bytes=p.kv_bytes,
            flops=p.flops,
            causal_square_ms=t_sq,
            causal_square_flops=sq_flops,
        )
    )
    results["table"] = rows

    log(
        "| work | Triton ms | TB/s (KV) | TFLOP/s | SDPA contiguous ms | naive gather+SDPA ms | "
        "Triton vs SDPA (throughput) | Triton vs naive |"
    )
    log("|---|---|---|---|---|---|---|---|")
    for r in rows:
        tflops = f"{r['flops'] / r['triton'] / 1e9:.0f}" if "flops" in r else "-"
        log(
            f"| {r['kind']} {r['shape']} | {r['triton']:.3f} | {r['kv_bytes'] / r['triton'] / 1e9:.2f} | {tflops} | "
            f"{r['sdpa']:.3f} ({r['kv_bytes'] / r['sdpa'] / 1e9:.2f} TB/s) | {r['naive']:.3f} | "
            f"{r['sdpa'] / r['triton']:.2f}x | {r['naive'] / r['triton']:.2f}x |"
        )
    pr = rows[-1]
    log(
        f"prefill SDPA: offset-causal mask, enable_gqa {pr['sdpa_gqa']:.3f} ms "
        f"({pr['flops'] / pr['sdpa_gqa'] / 1e9:.0f} TFLOP/s); K/V expanded to {H} heads {pr['sdpa_expanded']:.3f} ms "
        f"({pr['flops'] / pr['sdpa_expanded'] / 1e9:.0f} TFLOP/s); causal square {PREFILL_SHAPE[0]} x "
        f"{PREFILL_SHAPE[1] + PREFILL_SHAPE[2]} (flash ceiling) {pr['causal_square_ms']:.3f} ms "
        f"({pr['causal_square_flops'] / pr['causal_square_ms'] / 1e9:.0f} TFLOP/s)"
    )
    for r in rows[:-1]:
        log(
            f"{r['kind']} {r['shape']}: KV-bytes floor at 4.25 TB/s {r['kv_bytes'] / 4.25e9:.3f} ms; "
            f"Triton {r['kv_bytes'] / 4.25e9 / r['triton']:.2f} of floor, SDPA {r['kv_bytes'] / 4.25e9 / r['sdpa']:.2f}"
        )


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sweep", action="store_true", help="time every tile configuration")
    ap.add_argument(
        "--split-grid", action="store_true", help="time split-K segment counts over a grid"
    )
    ap.add_argument("--skip-check", action="store_true", help="skip the correctness step")
    ap.add_argument(
        "--quick-check",
        action="store_true",
        help="correctness on bf16 (all head dims, block sizes, modes) + one fp32/fp16 case each",
    )
    ap.add_argument(
        "--out", default=os.environ.get("OUT", "."), help="folder for kernels.json/kernels.log"
    )
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("bench/kernels.py needs a CUDA GPU", file=sys.stderr)
        return 2
    device = torch.device("cuda")
    import triton

    log(
        f"{time.strftime('%Y-%m-%d %H:%M:%S')} {torch.cuda.get_device_name()} torch {torch.__version__} "
        f"triton {triton.__version__}"
    )
    results: dict = {}
    t0 = time.time()
    try:
        if not args.skip_check:
            if not check_correctness(device, quick=args.quick_check):
                return 1
            log(f"(correctness {time.time() - t0:.0f} s)")
        g = torch.Generator(device=device).manual_seed(1234)
        if args.sweep:
            run_sweep(device, g, results)
            log(f"(sweep done at {time.time() - t0:.0f} s)")
        if args.split_grid:
            run_split_grid(device, g, results)
            log(f"(split grid done at {time.time() - t0:.0f} s)")
        run_table(device, g, results)
        log(f"(total {time.time() - t0:.0f} s)")
    finally:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "kernels.json").write_text(json.dumps(results, indent=1, default=str))
        (out / "kernels.log").write_text("\n".join(LOG) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
