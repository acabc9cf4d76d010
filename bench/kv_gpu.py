"""Quantized KV cache and the decode kernel's head-layout sweep on a CUDA GPU (the H200).

One process, in this order (``--budget`` seconds bound the optional parts):

1. ``check``: the compiled kernels with FP8/INT8 caches on ragged batches (prefill over a cached
   prefix, chunked prefill, decode; forced split-K) against the torch reference reading the
   same quantized pool, and the KV write / fused rotary write against the torch quantizer (in a
   second process, beside the parallel precompile); then every INT8 value and finite E4M3 byte
   through both conversions (``kv_cvt`` 0 and 1).
2. ``quant``: decode at 64 x 4096, 16 x 32768 and 256 x 1024, 32 query / 8 KV heads, d128:
   bf16 vs FP8 vs INT8 caches, in TB/s of the bytes the kernel actually reads (values + float32
   scales) and as the speed ratio against bf16 (the bytes halve: 2x is the limit); each timed
   quantized launch checked against the torch reference. Then a grid of both conversions x
   tiles x (warps, stages) x segment counts (quant_grid.json).
3. ``sweep``: bf16 decode against torch SDPA on contiguous caches (``enable_gqa=True``) over GQA
   groups 1, 2, 4, 7, 8 (32/32, 32/16, 32/8, 28/4, 32/4 heads), head_dim 64 and 128, batch x
   context 1 x 32k, 8 x 8k, 32 x 8k, 256 x 1k; every row (checked against SDPA), its ratio,
   the worst row.
4. ``engine``: the 8B shape (random weights) at batch 256, 512-token prompts, 128 new tokens,
   bf16 vs INT8 vs FP8 KV: output tok/s, and the pool's blocks -> the most 4k-context requests
   resident.
5. ``run3``: after the rest, small grids around the 1-byte rule and 1-2 warp CTAs on the sweep
   rows that were under 0.9 of SDPA (run3_grid.json).

``--tune`` instead times the whole variant grid (quantized shapes and every sweep row) into
tune.json, the data behind ``decode_config`` / ``choose_num_segments`` / ``KV_CVT_BY_QUANT``.
All kernel variants are compiled first by 14 processes into triton's cache (``precompile``).
Times are medians of CUDA-graph replays (bench/kernels.py's ``bench``). Usage:
``python bench/kv_gpu.py [--tune] [--parts check,quant,sweep,engine,run3] --out $OUT``.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.kernels import bench, dense_from_paged, make_paged  # noqa: E402
from local_engine.attention import torch_ref  # noqa: E402
from local_engine.attention import triton_backend as tb  # noqa: E402
from local_engine.attention.triton_backend import KernelConfig  # noqa: E402
from local_engine.kv_cache.quant import (  # noqa: E402
    DEFAULT_LAYOUT,
    SCALE_BYTES,
    layer_views,
    quantize,
)

LOG: list = []
RES: dict = {}
BS = 16
FMT_DTYPE = {"fp8": torch.float8_e4m3fn, "int8": torch.int8}


def log(msg: str = "") -> None:
    print(msg, flush=True)
    LOG.append(msg)


def rel(a, b) -> float:
    return float((a.double() - b.double()).norm() / b.double().norm().clamp_min(1e-30))


def fmt_layout(fmt: str) -> tuple[str, str]:
    """``"int8"`` -> (``"int8"``, the engine's default layout); ``"int8/tm"`` -> the
    sessions 1-2 ``"token_major"`` layout (kv_cache.quant.LAYOUTS)."""
    name, _, lay = fmt.partition("/")
    return name, ("token_major" if lay == "tm" else DEFAULT_LAYOUT)


def quantized_pool(k_src, v_src, fmt):
    """A quantized pool holding ``k_src``/``v_src`` ([num_blocks, bs, Hkv, D]) in the engine's
    layout (values and float32 scales inside each block; ``fmt`` "int8/tm" etc.: the old
    token-major layout); returns (k, v, k_scale, v_scale)."""
    nb, bs, hkv, d = k_src.shape
    name, layout = fmt_layout(fmt)
    raw = torch.zeros(
        (1, 2, nb, bs * hkv * (d + SCALE_BYTES)), dtype=torch.uint8, device=k_src.device
    )
    kc, vc, ks, vs = layer_views(raw, bs, hkv, d, FMT_DTYPE[name], layout)[0]
    for src, c, s in ((k_src, kc, ks), (v_src, vc, vs)):
        for i in range(0, nb, 4096):  # chunks: the float32 temporaries stay small
            q, sc = quantize(src[i : i + 4096], c.dtype)
            c[i : i + 4096] = q
            s[i : i + 4096] = sc
    return kc, vc, ks, vs


class Decode:
    """``batch`` sequences of ``ctx`` tokens (or of ``ctx_lens``) in shuffled blocks; bf16 or
    quantized pool."""

    def __init__(
        self,
        batch,
        ctx,
        h,
        hkv,
        d,
        device,
        g,
        fmt="bf16",
        with_dense=False,
        ctx_lens=None,
        shuffle=True,
    ):
        self.batch, self.ctx, self.h, self.hkv, self.d = batch, ctx, h, hkv, d
        lens = list(ctx_lens) if ctx_lens is not None else [ctx] * batch
        assert len(lens) == batch and (not with_dense or ctx_lens is None)
        k, v, self.bt = make_paged(lens, hkv, d, BS, torch.bfloat16, device, g, shuffle=shuffle)
        self.q = torch.randn(batch, h, d, generator=g, device=device).to(torch.bfloat16)
        self.cu = torch.arange(batch + 1, dtype=torch.int32, device=device)
        self.sl = torch.tensor(lens, dtype=torch.int32, device=device)
        self.fmt = fmt
        tokens = sum(lens)
        if with_dense:
            kd = torch.stack([dense_from_paged(k, self.bt[i], ctx) for i in range(batch)])
            vd = torch.stack([dense_from_paged(v, self.bt[i], ctx) for i in range(batch)])
            self.kd, self.vd = kd.transpose(1, 2).contiguous(), vd.transpose(1, 2).contiguous()
        if fmt == "bf16":
            self.k, self.v, self.ks, self.vs = k, v, None, None
            self.bytes = 2 * tokens * hkv * d * 2
        else:
            self.k, self.v, self.ks, self.vs = quantized_pool(k, v, fmt)
            del k, v
            self.bytes = 2 * tokens * hkv * (d + SCALE_BYTES)

    def triton(self, **kw):
        return lambda: tb.paged_attention(
            self.q,
            self.k,
            self.v,
            self.bt,
            self.cu,
            self.sl,
            k_scale=self.ks,
            v_scale=self.vs,
            **kw,
        )

    def sdpa(self):
        q4 = self.q[:, :, None, :]
        return lambda: F.scaled_dot_product_attention(q4, self.kd, self.vd, enable_gqa=True)


# ----------------------------------------------------------------------------- 1. correctness
def check(device) -> bool:
    log("## correctness (compiled kernels, quantized caches)")
    g = torch.Generator(device=device).manual_seed(7)
    ok = True
    for fmt in ("fp8", "int8"):
        for h, hkv, d in ((32, 8, 128), (9, 3, 64), (28, 4, 128)):
            ctx_lens, q_lens = [700, 33, 1, 260, 16], [1, 33, 1, 57, 16]
            k, v, bt = make_paged(ctx_lens, hkv, d, BS, torch.bfloat16, device, g)
            kc, vc, ks, vs = quantized_pool(k, v, fmt)
            q = torch.randn(sum(q_lens), h, d, generator=g, device=device).to(torch.bfloat16)
            cu = torch.tensor(
                [0] + list(torch.tensor(q_lens).cumsum(0)), dtype=torch.int32, device=device
            )
            sl = torch.tensor(ctx_lens, dtype=torch.int32, device=device)
            bt = torch.where(bt >= kc.shape[0], 0, bt)
            ref = torch_ref.paged_attention(q, kc, vc, bt, cu, sl, k_scale=ks, v_scale=vs)
            for nseg in (None, 1, 4):
                out = tb.paged_attention(
                    q, kc, vc, bt, cu, sl, num_segments=nseg, k_scale=ks, v_scale=vs
                )
                e = rel(out, ref)
                good = e < 2e-2 and not out.isnan().any()
                ok &= good
                log(
                    f"attention {fmt} {h}/{hkv} d{d} nseg={nseg}: rel err vs torch ref {e:.2e} "
                    f"{'ok' if good else 'FAIL'}"
                )
            # decode-only batch (the decode tile choice)
            cu1 = torch.arange(len(ctx_lens) + 1, dtype=torch.int32, device=device)
            q1 = q[: len(ctx_lens)].contiguous()
            ref1 = torch_ref.paged_attention(q1, kc, vc, bt, cu1, sl, k_scale=ks, v_scale=vs)
            e = rel(tb.paged_attention(q1, kc, vc, bt, cu1, sl, k_scale=ks, v_scale=vs), ref1)
            ok &= e < 2e-2
            log(f"decode {fmt} {h}/{hkv} d{d}: rel err {e:.2e} {'ok' if e < 2e-2 else 'FAIL'}")
        # KV write through the slot mapping: same scales, values within one level
        hkv, d, T = 8, 128, 300
        key = torch.randn(T, hkv, d, device=device, generator=g).to(torch.bfloat16) * 3
        val = torch.randn(T, hkv, d, device=device, generator=g).to(torch.bfloat16)
        raw = torch.zeros((1, 2, 40, BS * hkv * (d + 4)), dtype=torch.uint8, device=device)
        raw2 = raw.clone()
        kc, vc, ks, vs = layer_views(raw, BS, hkv, d, FMT_DTYPE[fmt])[0]
        kr, vr, ksr, vsr = layer_views(raw2, BS, hkv, d, FMT_DTYPE[fmt])[0]
        slots = torch.randperm(40 * BS, device=device, generator=g)[:T]
        tb.write_kv_cache(key, val, kc, vc, slots, k_scale=ks, v_scale=vs)
        torch_ref.write_kv_cache(key, val, kr, vr, slots, k_scale=ksr, v_scale=vsr)
        same = float((raw == raw2).float().mean())
        ok &= same > 0.999
        log(
            f"write {fmt}: bytes equal to the torch quantizer: {same:.5f} {'ok' if same > 0.999 else 'FAIL'}"
        )
    return ok


# ----------------------------------------------------------------------------- 2. quant table
def quant_table(device, explore: bool):
    log("## decode with quantized KV (32/8 heads, d128, block 16)")
    g = torch.Generator(device=device).manual_seed(1)
    sm = torch.cuda.get_device_properties(device).multi_processor_count
    rows = []
    variants = [("bf16", None), ("fp8", None), ("int8", None)]
    for batch, ctx in ((64, 4096), (16, 32768), (256, 1024)):
        t = {}
        for fmt, _ in variants:
            name = fmt
            p = Decode(batch, ctx, 32, 8, 128, device, g, fmt)
            t[name] = (bench(p.triton()), p.bytes)
            if fmt != "bf16":  # the timed launch against the torch reference on the same pool
                ref = torch_ref.paged_attention(
                    p.q, p.k, p.v, p.bt, p.cu, p.sl, k_scale=p.ks, v_scale=p.vs
                )
                e = rel(p.triton()(), ref)
                log(f"  {fmt} {batch}x{ctx}: rel err vs torch ref {e:.2e}")
                RES.setdefault("quant_err", {})[f"{fmt} {batch}x{ctx}"] = e
                del ref
            if explore and fmt != "bf16":
                base = tb.decode_config(128, 4, 1, batch * 8, sm)
                best = None
                for tn in (64, 128, 256):
                    for w, st in ((4, 2), (4, 3), (8, 2), (8, 3)):
                        cfg = KernelConfig(16, tn, w, st)
                        rule = tb.choose_num_segments(batch * 8, ctx, sm, tn, tn * 128)
                        for nseg in sorted({rule, max(1, rule // 2), min(256, rule * 2)}):
                            try:
                                ms = bench(
                                    p.triton(config=cfg, num_segments=nseg),
                                    inner=5,
                                    reps=5,
                                )
                            except Exception as exc:  # noqa: BLE001
                                log(f"  {name} {cfg}: {type(exc).__name__}: {str(exc)[:100]}")
                                continue
                            if best is None or ms < best[0]:
                                best = (ms, cfg, nseg)
                if best:
                    log(
                        f"  {name} {batch}x{ctx}: default {t[name][0]:.4f} ms (tile {base.tile_n}), "
                        f"best {best[0]:.4f} ms {best[1]} seg {best[2]} "
                        f"({p.bytes / best[0] / 1e9:.2f} TB/s)"
                    )
                    RES.setdefault("quant_best", {})[f"{name} {batch}x{ctx}"] = [
                        best[0],
                        str(best[1]),
                        best[2],
                    ]
            del p
            torch.cuda.empty_cache()
        for name, (ms, by) in t.items():
            eb = 2 if name == "bf16" else 1
            cfg = tb.decode_config(128, 4, eb, batch * 8, sm)
            nseg = tb.choose_num_segments(
                batch * 8, ctx, sm, cfg.tile_n, tb.split_tile_bytes(cfg, 128, eb, decode=True)
            )
            rows.append(
                dict(
                    shape=f"{batch}x{ctx}",
                    fmt=name,
                    ms=ms,
                    bytes=by,
                    tbps=by / ms / 1e9,
                    speedup=t["bf16"][0] / ms,
                    config=f"{cfg.tile_n}, {cfg.num_warps}, {cfg.num_stages}; {nseg}",
                )
            )
    log(
        "| batch x context | KV | keys, warps, stages; segments | ms | bytes read | TB/s | speed vs bf16 |"
    )
    log("|---|---|---|---|---|---|---|")
    for r in rows:
        log(
            f"| {r['shape']} | {r['fmt']} | {r['config']} | {r['ms']:.4f} | {r['bytes'] / 1e6:.0f} MB | "
            f"{r['tbps']:.2f} | {r['speedup']:.2f}x |"
        )
    RES["quant"] = rows


# ----------------------------------------------------------------------------- 3. sweep
LAYOUTS = [(32, 32), (32, 16), (32, 8), (28, 4), (32, 4)]
SHAPES = [(1, 32768), (8, 8192), (32, 8192), (256, 1024)]


def explore_row(p, sm, deadline):
    """Best (config, segments) over a small grid around the rule's choice."""
    group = p.h // p.hkv
    base = tb.decode_config(p.d, group, 2, p.batch * p.hkv, sm)
    tiles = sorted({max(16, base.tile_n // 2), base.tile_n, base.tile_n * 2})
    cfgs = [
        KernelConfig(base.block_m, tn, w, st)
        for tn in tiles
        for (w, st) in ((4, 2), (4, 3), (8, 2))
    ]
    best = None
    for cfg in cfgs:
        rule = tb.choose_num_segments(p.batch * p.hkv, p.ctx, sm, cfg.tile_n, cfg.tile_n * p.d * 2)
        for nseg in sorted(
            {max(1, rule // 4), max(1, rule // 2), rule, min(256, rule * 2), min(256, rule * 4)}
        ):
            if time.time() > deadline:
                return best
            try:
                ms = bench(p.triton(config=cfg, num_segments=nseg), inner=5, reps=5)
            except Exception as exc:  # noqa: BLE001
                log(f"  {cfg} nseg={nseg}: {type(exc).__name__}: {str(exc)[:120]}")
                continue
            if best is None or ms < best[0]:
                best = (ms, cfg, nseg)
    return best


def sweep(device, explore: bool, deadline: float):
    log("## layout sweep: bf16 decode vs SDPA on contiguous caches (block 16)")
    sm = torch.cuda.get_device_properties(device).multi_processor_count
    g = torch.Generator(device=device).manual_seed(2)
    rows = []
    for d in (128, 64):
        for h, hkv in LAYOUTS:
            for batch, ctx in SHAPES:
                if time.time() > deadline:
                    log("(sweep stopped: time budget)")
                    RES["sweep"] = rows
                    return rows
                p = Decode(batch, ctx, h, hkv, d, device, g, "bf16", with_dense=True)
                out = p.triton()()
                ref = p.sdpa()()[:, :, 0, :]
                err = rel(out, ref)
                t_tri = bench(p.triton())
                t_sdpa = bench(p.sdpa())
                cfg = tb.decode_config(d, h // hkv, 2, batch * hkv, sm)
                nseg = tb.choose_num_segments(
                    batch * hkv, p.bt.shape[1] * BS, sm, cfg.tile_n, cfg.tile_n * d * 2
                )
                t_attn = None
                if nseg > 1:  # the attention kernel alone: what the split-K merge costs
                    with no_merge():
                        t_attn = bench(p.triton())
                    t_tri = min(t_tri, bench(p.triton()))  # A/B/A: the full call again
                r = dict(
                    heads=f"{h}/{hkv}",
                    group=h // hkv,
                    d=d,
                    shape=f"{batch}x{ctx}",
                    triton_ms=t_tri,
                    sdpa_ms=t_sdpa,
                    ratio=t_sdpa / t_tri,
                    tbps=p.bytes / t_tri / 1e9,
                    sdpa_tbps=p.bytes / t_sdpa / 1e9,
                    tile_n=cfg.tile_n,
                    segments=nseg,
                    err=err,
                    attn_only_ms=t_attn,
                )
                if explore and r["ratio"] < 0.9:
                    best = explore_row(p, sm, deadline)
                    if best:
                        r.update(
                            best_ms=best[0],
                            best_cfg=str(best[1]),
                            best_seg=best[2],
                            best_ratio=t_sdpa / best[0],
                        )
                rows.append(r)
                extra = (
                    f" | best {r['best_ratio']:.2f} ({r['best_cfg']}, seg {r['best_seg']})"
                    if "best_ms" in r
                    else ""
                )
                log(
                    f"| {r['heads']} | {d} | {r['shape']} | {t_tri:.4f} | {r['tbps']:.2f} | {t_sdpa:.4f} | "
                    f"{r['sdpa_tbps']:.2f} | {r['ratio']:.2f} | {cfg} seg {nseg} | err {err:.1e}{extra}"
                )
                del p
                torch.cuda.empty_cache()
    RES["sweep"] = rows
    return rows


class no_merge:
    """Within: paged_attention launches no split-K merge kernel (timing the attention kernel
    alone; the output is then wrong)."""

    class _Noop:
        def __getitem__(self, grid):
            return lambda *a, **k: None

    def __enter__(self):
        self.saved = tb._reduce_segments_kernel
        tb._reduce_segments_kernel = self._Noop()

    def __exit__(self, *exc):
        tb._reduce_segments_kernel = self.saved


def print_sweep(rows):
    if not rows:
        return
    log("")
    log(
        "| heads (q/kv) | group | head_dim | batch x ctx | Triton ms | TB/s | SDPA ms | SDPA TB/s | Triton/SDPA speed | tile, segments |"
    )
    log("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        log(
            f"| {r['heads']} | {r['group']} | {r['d']} | {r['shape']} | {r['triton_ms']:.4f} | {r['tbps']:.2f} | "
            f"{r['sdpa_ms']:.4f} | {r['sdpa_tbps']:.2f} | {r['ratio']:.2f} | {r['tile_n']}, {r['segments']} |"
        )
    split = [r for r in rows if r.get("attn_only_ms")]
    if split:
        log("")
        log(
            "| heads | d | batch x ctx | Triton ms | attention kernel alone ms | merge + gap ms "
            "| SDPA ms | ratio without merge |"
        )
        log("|---|---|---|---|---|---|---|---|")
        for r in split:
            a = r["attn_only_ms"]
            log(
                f"| {r['heads']} | {r['d']} | {r['shape']} | {r['triton_ms']:.4f} | {a:.4f} | "
                f"{r['triton_ms'] - a:.4f} | {r['sdpa_ms']:.4f} | {r['sdpa_ms'] / a:.2f} |"
            )
    worst = min(rows, key=lambda r: r["ratio"])
    under = sum(r["ratio"] < 0.9 for r in rows)
    log(
        f"worst row: {worst['heads']} d{worst['d']} {worst['shape']}: {worst['ratio']:.2f} of SDPA; "
        f"{under} of {len(rows)} rows under 0.9"
    )


# ----------------------------------------------------------------------------- tuning grid
# --tune: every variant of the quantized decode (3 shapes x FP8/INT8) and of the bf16 sweep
# rows, each checked against a reference and timed; the table (tune.json) is what the rules
# in triton_backend (decode_config, choose_num_segments, KV_CVT_BY_QUANT) are derived from.
# A variant is (KernelConfig, num_segments, kv_cvt).
QUANT_SHAPES = [(64, 4096), (16, 32768), (256, 1024)]
TUNE_WS = {"bf16": ((4, 2), (8, 2), (4, 3)), "q": ((4, 2), (4, 3), (8, 2), (8, 3), (2, 3))}


def _segs(rule: int, factors) -> list[int]:
    return sorted({min(256, max(1, int(rule * f))) for f in factors})


def quant_rule(batch, ctx, sm, fmt, d=128, hkv=8, group=4):
    cfg = tb.decode_config(d, group, 1, batch * hkv, sm)
    tile_bytes = tb.split_tile_bytes(cfg, d, 1, decode=True)
    nseg = tb.choose_num_segments(batch * hkv, ctx, sm, cfg.tile_n, tile_bytes)
    return cfg, nseg, tb.KV_CVT_BY_QUANT[1 if fmt.startswith("int8") else 2]


def quant_variants(batch, ctx, sm, fmt="fp8"):
    """The rule first, then both conversions over tiles x (warps, stages) x segment counts."""
    rule = quant_rule(batch, ctx, sm, fmt)
    out = [rule]
    for cvt in (0, 1):
        for tn in (64, 128, 256):
            for w, st in TUNE_WS["q"]:
                cfg = KernelConfig(16, tn, w, st)
                r = tb.choose_num_segments(batch * 8, ctx, sm, tn, tn * 128)
                for nseg in _segs(r, (1, 2) if r == 1 else (0.5, 1, 2)):
                    if (cfg, nseg, cvt) != rule:
                        out.append((cfg, nseg, cvt))
    return out


def sweep_rule(batch, ctx, h, hkv, d, sm):
    cfg = tb.decode_config(d, h // hkv, 2, batch * hkv, sm)
    nseg = tb.choose_num_segments(batch * hkv, ctx, sm, cfg.tile_n, cfg.tile_n * d * 2)
    return cfg, nseg, 0


def sweep_variants(batch, ctx, h, hkv, d, sm):
    out = [sweep_rule(batch, ctx, h, hkv, d, sm)]
    t16 = 16384 // (d * 2)
    for tn in (t16, 2 * t16):
        for w, st in TUNE_WS["bf16"]:
            cfg = KernelConfig(out[0][0].block_m, tn, w, st)
            r = tb.choose_num_segments(batch * hkv, ctx, sm, tn, tn * d * 2)
            for nseg in _segs(r, (1, 2, 4) if r == 1 else (0.5, 1, 2)):
                if (cfg, nseg, 0) != out[0]:
                    out.append((cfg, nseg, 0))
    return out


def _variant_fn(p, cfg, nseg, cvt):
    kw = dict(config=cfg, num_segments=nseg)
    if p.fmt != "bf16":
        kw["kv_cvt"] = cvt
    return p.triton(**kw)


def _compile_worker(jobs):
    """Compile (by one small launch each) the kernels of ``jobs`` into triton's disk cache."""
    device = torch.device("cuda")
    g = torch.Generator(device=device).manual_seed(0)
    done = 0
    for h, hkv, d, fmt, variants in jobs:
        p = Decode(2, 512, h, hkv, d, device, g, fmt)
        for cfg, nseg, cvt in variants:
            try:
                # split launches: every merge chunk (2 .. 128 segments)
                for n in (2, 4, 8, 16, 32, 64, 128, 256) if nseg > 1 else (1,):
                    _variant_fn(p, cfg, n, cvt)()
                done += 1
            except Exception:  # noqa: BLE001 - the main process reports it
                pass
    torch.cuda.synchronize()
    return done


def precompile(groups, workers: int = 14) -> None:
    """Compile every (layout, variant) in parallel processes; the timing process then loads
    them from triton's cache. The small problem keeps the specialisations (all strides and
    table widths multiples of 16, as in the timed shapes)."""
    import multiprocessing as mp

    t0 = time.time()
    jobs = [[] for _ in range(workers)]
    i = 0
    for layout, variants in groups.items():
        seen = set()
        for cfg, nseg, cvt in variants:
            key = (cfg, nseg > 1, cvt)
            if key not in seen:
                seen.add(key)
                jobs[i % workers].append((*layout, [(cfg, 2 if nseg > 1 else 1, cvt)]))
                i += 1
    with mp.get_context("spawn").Pool(workers) as pool:
        n = sum(pool.map(_compile_worker, jobs))
    log(f"precompiled {n} of {i} kernel variants in {time.time() - t0:.1f}s ({workers} processes)")


def conversion_check(device) -> bool:
    """Every INT8 value and every finite E4M3 byte through both conversions (kv_cvt 0, 1): one
    sequence whose K and V hold all of them (unit scales), against the torch reference."""
    ok = True
    g = torch.Generator(device=device).manual_seed(11)
    for fmt in ("int8", "fp8"):
        hkv, d, ctx = 1, 128, 256
        k, v, bt = make_paged([ctx], hkv, d, BS, torch.bfloat16, device, g)
        kc, vc, ks, vs = quantized_pool(k, v, fmt)
        allb = torch.arange(256, dtype=torch.int32, device=device).to(torch.uint8)
        if fmt == "fp8":
            allb = allb[(allb & 0x7F) != 0x7F]  # E4M3 NaNs
        vals = allb[torch.randint(0, allb.numel(), kc.shape, generator=g, device=device)]
        kc.view(torch.uint8).copy_(vals)
        vc.view(torch.uint8).copy_(vals.flip(0))
        ks.fill_(1.0 / 64)  # each byte value appears ~128 times in the sequence's blocks
        vs.fill_(1.0 / 64)
        q = torch.randn(1, 4, d, generator=g, device=device).to(torch.bfloat16) * 0.1
        cu = torch.tensor([0, 1], dtype=torch.int32, device=device)
        sl = torch.tensor([ctx], dtype=torch.int32, device=device)
        ref = torch_ref.paged_attention(q, kc, vc, bt, cu, sl, k_scale=ks, v_scale=vs)
        for cvt in (0, 1):
            out = tb.paged_attention(q, kc, vc, bt, cu, sl, k_scale=ks, v_scale=vs, kv_cvt=cvt)
            e = rel(out, ref)
            good = e < 1e-2 and not out.isnan().any()
            ok &= good
            log(f"all-bytes {fmt} kv_cvt={cvt}: rel err {e:.2e} {'ok' if good else 'FAIL'}")
    return ok


def tune_groups(sm, final: bool):
    """Variants to compile per layout: the whole grid, or (final) the rules plus the quantized
    grid of both conversions."""
    groups: dict = {}
    for fmt in ("fp8", "int8"):
        for batch, ctx in QUANT_SHAPES:
            groups.setdefault((32, 8, 128, fmt), []).extend(quant_variants(batch, ctx, sm, fmt))
    for d in (128, 64):
        for h, hkv in LAYOUTS:
            for batch, ctx in SHAPES:
                v = (sweep_rule if final else sweep_variants)(batch, ctx, h, hkv, d, sm)
                groups.setdefault((h, hkv, d, "bf16"), []).extend([v] if final else v)
    return groups


def _run_variants(p, variants, ref, extra, table, deadline, reps=3):
    row = dict(extra, variants=[])
    try:  # warm-up: the first variant timed on a fresh pool read slower (session 3 grids)
        bench(_variant_fn(p, *variants[0]), inner=6, reps=2)
    except Exception:  # noqa: BLE001 - reported when timed below
        pass
    for cfg, nseg, cvt in variants:
        if time.time() > deadline:
            break
        fn = _variant_fn(p, cfg, nseg, cvt)
        try:
            e = rel(fn(), ref)
            ms = bench(fn, inner=6, reps=reps)
        except Exception as exc:  # noqa: BLE001
            log(f"  {extra} {cfg} seg {nseg} cvt {cvt}: {type(exc).__name__}: {str(exc)[:160]}")
            continue
        row["variants"].append(
            dict(cfg=list(cfg.__dict__.values()), nseg=nseg, cvt=cvt, ms=ms, err=e)
        )
    good = [v for v in row["variants"] if v["err"] < 1e-2]
    if good:
        best = min(good, key=lambda v: v["ms"])
        row["best"] = best
        log(
            f"{extra}: rule {row['variants'][0]['ms']:.4f} ms, best {best['ms']:.4f} ms "
            f"{best['cfg']} seg {best['nseg']} cvt {best['cvt']} "
            f"(max err {max(v['err'] for v in row['variants']):.1e})"
        )
    table.append(row)
    return row


def quant_grid(device, sm, deadline, table):
    g = torch.Generator(device=device).manual_seed(5)
    for batch, ctx in QUANT_SHAPES:
        pb = Decode(batch, ctx, 32, 8, 128, device, g, "bf16")
        ms_bf16 = bench(pb.triton(), inner=6, reps=3)
        del pb
        for fmt in ("fp8", "int8"):
            p = Decode(batch, ctx, 32, 8, 128, device, g, fmt)
            ref = torch_ref.paged_attention(
                p.q, p.k, p.v, p.bt, p.cu, p.sl, k_scale=p.ks, v_scale=p.vs
            )
            extra = dict(kind="quant", fmt=fmt, shape=f"{batch}x{ctx}", bf16_ms=ms_bf16)
            _run_variants(p, quant_variants(batch, ctx, sm, fmt), ref, extra, table, deadline)
            del p, ref
            torch.cuda.empty_cache()


def tune(device, deadline: float, out_dir: Path) -> None:
    sm = torch.cuda.get_device_properties(device).multi_processor_count
    precompile(tune_groups(sm, final=False))
    table: list = []
    quant_grid(device, sm, deadline, table)
    (out_dir / "tune.json").write_text(json.dumps(table, default=str))
    g = torch.Generator(device=device).manual_seed(5)
    for d in (128, 64):
        for h, hkv in LAYOUTS:
            for batch, ctx in SHAPES:
                if time.time() > deadline:
                    log("(tune stopped: time budget)")
                    (out_dir / "tune.json").write_text(json.dumps(table, default=str))
                    return
                _sweep_row((batch, ctx, h, hkv, d), device, g, sweep_variants, sm, table, deadline)
    (out_dir / "tune.json").write_text(json.dumps(table, default=str))


# ----------------------------------------------------------------------------- run 3 grids
# The 15 layout-sweep rows under 0.9 of SDPA in run 2 (heads q/kv, head_dim, batch, context).
WORST_ROWS = [
    (32, 8, 128, 1, 32768),
    (28, 4, 128, 1, 32768),
    (28, 4, 128, 8, 8192),
    (28, 4, 128, 32, 8192),
    (32, 4, 128, 1, 32768),
    (32, 16, 64, 1, 32768),
    (32, 16, 64, 256, 1024),
    (32, 8, 64, 1, 32768),
    (32, 8, 64, 8, 8192),
    (32, 8, 64, 32, 8192),
    (28, 4, 64, 1, 32768),
    (28, 4, 64, 8, 8192),
    (32, 4, 64, 1, 32768),
    (32, 4, 64, 8, 8192),
    (32, 32, 64, 256, 1024),
]


def quant_small_variants(batch, ctx, sm, fmt):
    """The rule, then fewer / more warps per tile around it (both conversions)."""
    out = [quant_rule(batch, ctx, sm, fmt)]
    for cvt in (0, 1):
        for tn, w, st in ((32, 1, 3), (64, 1, 3), (64, 2, 2), (64, 2, 4), (128, 4, 3)):
            cfg = KernelConfig(16, tn, w, st)
            r = tb.choose_num_segments(batch * 8, ctx, sm, tn, tn * 128)
            for nseg in _segs(r, (1,) if r == 1 else (0.5, 1)):
                if (cfg, nseg, cvt) != out[0]:
                    out.append((cfg, nseg, cvt))
    return out


def bf16_small_variants(batch, ctx, h, hkv, d, sm):
    """The rule, then 1-2 warp CTAs at the rule's tile and half of it."""
    rule = sweep_rule(batch, ctx, h, hkv, d, sm)
    out = [rule]
    base = rule[0]
    for tn, w, st in (
        (base.tile_n, 2, 2),
        (base.tile_n, 2, 3),
        (base.tile_n // 2, 1, 3),
        (base.tile_n // 2, 2, 3),
    ):
        cfg = KernelConfig(base.block_m, tn, w, st)
        r = tb.choose_num_segments(batch * hkv, ctx, sm, tn, tn * d * 2)
        for nseg in _segs(r, (1, 2)):
            out.append((cfg, nseg, 0))
    return out


def run3_groups(sm):
    groups: dict = {}
    for fmt in ("fp8", "int8"):
        for batch, ctx in QUANT_SHAPES:
            groups.setdefault((32, 8, 128, fmt), []).extend(
                quant_small_variants(batch, ctx, sm, fmt)
            )
    for batch, ctx in QUANT_SHAPES:
        groups.setdefault((32, 8, 128, "bf16"), []).append(sweep_rule(batch, ctx, 32, 8, 128, sm))
    for h, hkv, d, batch, ctx in WORST_ROWS:
        groups.setdefault((h, hkv, d, "bf16"), []).extend(
            bf16_small_variants(batch, ctx, h, hkv, d, sm)
        )
    return groups


def quant_small_grid(device, sm, deadline, table):
    g = torch.Generator(device=device).manual_seed(6)
    for batch, ctx in QUANT_SHAPES:
        pb = Decode(batch, ctx, 32, 8, 128, device, g, "bf16")
        ms_bf16 = bench(pb.triton(), inner=6, reps=3)
        del pb
        for fmt in ("fp8", "int8"):
            if time.time() > deadline:
                return
            p = Decode(batch, ctx, 32, 8, 128, device, g, fmt)
            ref = torch_ref.paged_attention(
                p.q, p.k, p.v, p.bt, p.cu, p.sl, k_scale=p.ks, v_scale=p.vs
            )
            extra = dict(kind="quant", fmt=fmt, shape=f"{batch}x{ctx}", bf16_ms=ms_bf16)
            _run_variants(p, quant_small_variants(batch, ctx, sm, fmt), ref, extra, table, deadline)
            del p, ref
            torch.cuda.empty_cache()


def worst_rows_grid(device, sm, deadline, table):
    g = torch.Generator(device=device).manual_seed(7)
    for h, hkv, d, batch, ctx in dict.fromkeys(WORST_ROWS):
        if time.time() > deadline:
            return
        _sweep_row((batch, ctx, h, hkv, d), device, g, bf16_small_variants, sm, table, deadline)


def _sweep_row(row, device, g, variants, sm, table, deadline) -> None:
    """Time every variant of ``variants(batch, ctx, h, hkv, d, sm)`` on one bf16 sweep row
    ``(batch, ctx, h, hkv, d)`` against SDPA (its output the reference), into ``table``."""
    batch, ctx, h, hkv, d = row
    p = Decode(batch, ctx, h, hkv, d, device, g, "bf16", with_dense=True)
    ref = p.sdpa()()[:, :, 0, :]
    extra = dict(
        kind="sweep",
        heads=f"{h}/{hkv}",
        d=d,
        shape=f"{batch}x{ctx}",
        sdpa_ms=bench(p.sdpa(), inner=6, reps=3),
    )
    _run_variants(p, variants(batch, ctx, h, hkv, d, sm), ref, extra, table, deadline)
    del p, ref
    torch.cuda.empty_cache()


# ----------------------------------------------------------------------------- session 3
# --parts s3: the V-token-minor 1-byte layout (kv_cache.quant.DEFAULT_LAYOUT) against the old
# token-major one, over tiles x (warps, stages) x both conversions x segment counts
# (s3_grid.json), then the sweep with the split rows' attention kernel timed alone.
# run 1 (call 1): S3_CFGS x both conversions x S3_FMTS; run 2: --parts s3b, 1-warp CTAs and
# the rule's neighbours on the new layout only, and the wide-group bf16 rows' tiles
S3_CFGS = [(64, 2, 3), (64, 2, 2), (64, 4, 3), (128, 4, 3), (128, 4, 2), (128, 8, 3), (256, 8, 3)]
S3_FMTS = ("int8", "fp8", "int8/tm", "fp8/tm")
S3B_CFGS = [(64, 2, 2), (32, 1, 2), (32, 1, 3), (64, 1, 2), (64, 2, 3), (128, 4, 2)]
S3B_FMTS = ("int8", "fp8")
S3B_WIDE_ROWS = [
    (28, 4, 128, 1, 32768),
    (28, 4, 128, 8, 8192),
    (28, 4, 128, 32, 8192),
    (32, 4, 128, 1, 32768),
]
S3B_WIDE_CFGS = [(64, 4, 2), (64, 2, 3), (64, 2, 2), (128, 4, 2), (128, 8, 2), (128, 8, 3)]


def s3_quant_variants(batch, ctx, sm, fmt, cfgs=None):
    name, layout = fmt_layout(fmt)
    rule = quant_rule(batch, ctx, sm, name)
    out = [rule]
    if layout == "token_major":
        return out
    cvts = (0, 1) if cfgs is None else (rule[2],)
    for cvt in cvts:
        for tn, w, st in cfgs or S3_CFGS:
            cfg = KernelConfig(16, tn, w, st)
            r = tb.choose_num_segments(batch * 8, ctx, sm, tn, max(tn * 128, 16384))
            for nseg in _segs(r, (1,) if r == 1 else (0.5, 1, 2)):
                if (cfg, nseg, cvt) not in out:
                    out.append((cfg, nseg, cvt))
    return out


def s3b_quant_variants(batch, ctx, sm, fmt):
    return s3_quant_variants(batch, ctx, sm, fmt, S3B_CFGS)


def s3b_wide_variants(batch, ctx, h, hkv, d, sm):
    rule = sweep_rule(batch, ctx, h, hkv, d, sm)
    out = [rule]
    for tn, w, st in S3B_WIDE_CFGS:
        cfg = KernelConfig(rule[0].block_m, tn, w, st)
        nseg = tb.choose_num_segments(
            batch * hkv, ctx, sm, tn, tb.split_tile_bytes(cfg, d, 2, decode=True)
        )
        if (cfg, nseg, 0) not in out:
            out.append((cfg, nseg, 0))
    return out


# run 3 (--parts s3c): the final 1-byte rule (32 keys / 1 warp / 3 stages at d128, split to 8
# warps per SM) against its neighbours, at d128 and d64 (32/8 heads)
S3C_CFGS = [(32, 1, 3), (32, 1, 2), (64, 1, 3), (64, 2, 3)]
S3C_SHAPES = [(128, 64, 4096), (128, 16, 32768), (128, 256, 1024), (64, 64, 4096), (64, 16, 32768)]


def s3c_variants(batch, ctx, d, sm, fmt):
    rule = quant_rule(batch, ctx, sm, fmt, d=d)
    out = [rule]
    for tn, w, st in S3C_CFGS:
        cfg = KernelConfig(16, tn, w, st)
        own = tb.choose_num_segments(
            batch * 8, ctx, sm, tn, tb.split_tile_bytes(cfg, d, 1, decode=True)
        )
        for nseg in _segs(own, (1, 2) if own == 1 else (0.5, 1, 2)):
            if (cfg, nseg, rule[2]) not in out:
                out.append((cfg, nseg, rule[2]))
    return out


def s3c_grid(device, sm, deadline, table):
    g = torch.Generator(device=device).manual_seed(12)
    summary = []
    for d, batch, ctx in S3C_SHAPES:
        pb = Decode(batch, ctx, 32, 8, d, device, g, "bf16")
        ms_bf16 = bench(pb.triton())
        del pb
        for fmt in S3B_FMTS:
            if time.time() > deadline:
                return summary
            p = Decode(batch, ctx, 32, 8, d, device, g, fmt)
            ref = torch_ref.paged_attention(
                p.q, p.k, p.v, p.bt, p.cu, p.sl, k_scale=p.ks, v_scale=p.vs
            )
            extra = dict(kind="quant", fmt=fmt, shape=f"d{d} {batch}x{ctx}", bf16_ms=ms_bf16)
            row = _run_variants(
                p, s3c_variants(batch, ctx, d, sm, fmt), ref, extra, table, deadline, reps=7
            )
            if row.get("best"):
                summary.append(
                    (f"d{d} {batch}x{ctx}", fmt, ms_bf16, row["variants"][0], row["best"])
                )
            del p, ref
            torch.cuda.empty_cache()
    return summary


# run 5 (--parts s3d): register caps (maxnreg) for more warps per SM: the 1-byte decode
# (255 registers at 32 keys / 1 warp: 8 warps per SM) and the bf16 rows under 0.9
S3D_QUANT = [(32, 1, 3, None), (32, 1, 2, None), (32, 1, 2, 168), (32, 1, 2, 200), (32, 1, 3, 200)]
S3D_BF16_ROWS = [(28, 4, 64, 8, 8192), (32, 4, 64, 8, 8192), (32, 4, 128, 1, 32768)]


def s3d_quant_variants(batch, ctx, sm, fmt):
    rule = quant_rule(batch, ctx, sm, fmt)
    out = [rule]
    for tn, w, st, nreg in S3D_QUANT:
        cfg = KernelConfig(16, tn, w, st, nreg)
        own = tb.choose_num_segments(
            batch * 8, ctx, sm, tn, tb.split_tile_bytes(cfg, 128, 1, decode=True)
        )
        for nseg in _segs(own, (1, 2) if own == 1 else (1, 2)):
            if (cfg, nseg, rule[2]) not in out:
                out.append((cfg, nseg, rule[2]))
    return out


def s3d_bf16_variants(batch, ctx, h, hkv, d, sm):
    rule = sweep_rule(batch, ctx, h, hkv, d, sm)
    out = [rule]
    c = rule[0]
    for nreg in (128, 168):
        cfg = KernelConfig(c.block_m, c.tile_n, c.num_warps, c.num_stages, nreg)
        out.append((cfg, rule[1], 0))
    return out


def s3_groups(sm, b=False, c=False, dd=False):
    if dd:
        groups: dict = {}
        for fmt in S3B_FMTS:
            for batch, ctx in QUANT_SHAPES:
                groups.setdefault((32, 8, 128, fmt), []).extend(
                    s3d_quant_variants(batch, ctx, sm, fmt)
                )
        for h, hkv, d, batch, ctx in S3D_BF16_ROWS:
            groups.setdefault((h, hkv, d, "bf16"), []).extend(
                s3d_bf16_variants(batch, ctx, h, hkv, d, sm)
            )
        return groups
    if c:
        groups: dict = {}
        for d, batch, ctx in S3C_SHAPES:
            for fmt in S3B_FMTS:
                groups.setdefault((32, 8, d, fmt), []).extend(s3c_variants(batch, ctx, d, sm, fmt))
        return _with_sweep_rules(groups, sm)
    groups: dict = {}
    for fmt in S3B_FMTS if b else S3_FMTS:
        for batch, ctx in QUANT_SHAPES:
            v = (s3b_quant_variants if b else s3_quant_variants)(batch, ctx, sm, fmt)
            groups.setdefault((32, 8, 128, fmt), []).extend(v)
    if b:
        for h, hkv, d, batch, ctx in S3B_WIDE_ROWS:
            v = s3b_wide_variants(batch, ctx, h, hkv, d, sm)
            groups.setdefault((h, hkv, d, "bf16"), []).extend(v)
    return _with_sweep_rules(groups, sm)


def _with_sweep_rules(groups: dict, sm: int) -> dict:
    """``groups`` plus the bf16 sweep rule's launch of every layout row (head_dim 128 and 64)."""
    for d in (128, 64):
        for h, hkv in LAYOUTS:
            for batch, ctx in SHAPES:
                groups.setdefault((h, hkv, d, "bf16"), []).append(
                    sweep_rule(batch, ctx, h, hkv, d, sm)
                )
    return groups


def s3_quant_grid(device, sm, deadline, table, b=False, variants=None):
    g = torch.Generator(device=device).manual_seed(8)
    summary = []
    if variants is None:
        variants = s3b_quant_variants if b else s3_quant_variants
    fmts = S3B_FMTS if (b or variants is not s3_quant_variants) else S3_FMTS
    for batch, ctx in QUANT_SHAPES:
        pb = Decode(batch, ctx, 32, 8, 128, device, g, "bf16")
        ms_bf16 = bench(pb.triton())
        del pb
        for fmt in fmts:
            if time.time() > deadline:
                return summary
            p = Decode(batch, ctx, 32, 8, 128, device, g, fmt)
            ref = torch_ref.paged_attention(
                p.q, p.k, p.v, p.bt, p.cu, p.sl, k_scale=p.ks, v_scale=p.vs
            )
            extra = dict(kind="quant", fmt=fmt, shape=f"{batch}x{ctx}", bf16_ms=ms_bf16)
            row = _run_variants(
                p, variants(batch, ctx, sm, fmt), ref, extra, table, deadline, reps=5
            )
            if row.get("best"):
                rule = row["variants"][0]
                summary.append((f"{batch}x{ctx}", fmt, ms_bf16, rule, row["best"]))
            del p, ref
            torch.cuda.empty_cache()
    return summary


def print_s3(summary):
    log("")
    log(
        "| batch x ctx | KV | bf16 ms | rule ms | rule vs bf16 | best ms | best vs bf16 | best (tile, warps, stages, blk_m) seg cvt | max err |"
    )
    log("|---|---|---|---|---|---|---|---|---|")
    for shape, fmt, b, rule, best in summary:
        log(
            f"| {shape} | {fmt} | {b:.4f} | {rule['ms']:.4f} | {b / rule['ms']:.2f}x | "
            f"{best['ms']:.4f} | {b / best['ms']:.2f}x | {best['cfg']} {best['nseg']} {best['cvt']} | "
            f"{best['err']:.1e} |"
        )


def sdpa_kernels(device) -> None:
    """Which kernels (and how long on the device) one SDPA call and one Triton call launch, on
    two short sweep rows (torch.profiler)."""
    from torch.profiler import ProfilerActivity, profile

    g = torch.Generator(device=device).manual_seed(9)
    for h, hkv, d, batch, ctx in ((32, 4, 64, 1, 32768), (32, 8, 128, 8, 8192)):
        p = Decode(batch, ctx, h, hkv, d, device, g, "bf16", with_dense=True)
        for name, fn in (("sdpa", p.sdpa()), ("triton", p.triton())):
            for _ in range(3):
                fn()
            torch.cuda.synchronize()
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                for _ in range(20):
                    fn()
                torch.cuda.synchronize()
            ev = [e for e in prof.key_averages() if e.device_time_total > 0]
            for e in ev:
                log(
                    f"  {h}/{hkv} d{d} {batch}x{ctx} {name}: {e.key[:90]} x{e.count // 20} "
                    f"{e.device_time_total / 20:.2f} us/call"
                )
        del p
        torch.cuda.empty_cache()


def _check_process(q) -> None:
    """check() in its own process (its compiles overlap the parallel precompile)."""
    ok = check(torch.device("cuda"))
    q.put((ok, LOG))


# ----------------------------------------------------------------------------- 4. engine
def engine_run(device, folder: Path, deadline: float):
    from local_engine import SamplingParams
    from local_engine.engine import LLMEngine

    log("## engine, 8B shape, batch 256 x (512 prompt + 128 new), FP8 / INT8 vs bf16 KV")
    g = torch.Generator().manual_seed(3)
    prompts = torch.randint(10, 49000, (256, 512), generator=g).tolist()
    rows = {}
    kvds = os.environ.get("ENGINE_KV", "auto,int8,fp8").split(",")
    for kvd in kvds:
        if time.time() > deadline:
            log("(engine stopped: time budget)")
            break
        t0 = time.time()
        eng = LLMEngine.from_config(
            folder,
            device="cuda",
            kv_cache_dtype=kvd,
            max_num_seqs=256,
            max_model_len=4608,
            max_num_batched_tokens=8192,
            gpu_memory_utilization=0.9,
        )
        build = time.time() - t0
        nb = eng.kv_cache_manager.num_blocks
        params = SamplingParams(temperature=0.0, max_tokens=128, ignore_eos=True)
        # warm-up: compile the prefill / decode kernels at the workload's own shapes: 32 prompts of
        # 512 tokens fill two 8192-token prefill steps (session 4 run 5: with 16 short warm-up
        # requests the first big prefill compiled inside the timed run, and admitting all 256
        # took 3.2-6.4 s from run to run on unchanged prefill code)
        for i in range(32):
            eng.add_request(
                f"w{i}", prompts[i], SamplingParams(temperature=0.0, max_tokens=8, ignore_eos=True)
            )
        while eng.has_unfinished_requests():
            eng.step()
        eng.kv_cache_manager.reset_prefix_cache()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for i, p in enumerate(prompts):
            eng.add_request(f"r{i}", [t + 1 for t in p], params)
        n_out, first, decode_from, steps_decode = 0, None, None, 0
        while eng.has_unfinished_requests():
            outs = eng.step()
            for o in outs:
                if o.finished:
                    n_out += len(o.outputs[0].token_ids)
            if first is None and eng.metrics.num_waiting == 0:
                first = time.perf_counter() - t0
            # decode phase: every request admitted and past its prompt (all-decode steps)
            if decode_from is None and first is not None and len(outs) == 256:
                torch.cuda.synchronize()
                decode_from = time.perf_counter()
            elif decode_from is not None:
                steps_decode += 1
        torch.cuda.synchronize()
        wall = time.perf_counter() - t0
        if decode_from is not None and steps_decode:
            dec_s = time.perf_counter() - decode_from
            log(
                f"{kvd}: all admitted at {first:.2f}s; decode phase {steps_decode} steps in "
                f"{dec_s:.2f}s = {dec_s / steps_decode * 1e3:.2f} ms/step ({256 * steps_decode / dec_s:.0f} tok/s)"
            )
        name = "bf16" if kvd == "auto" else kvd
        rows[name] = dict(
            tok_s=n_out / wall,
            wall_s=wall,
            blocks=nb,
            resident_4k=nb // (4096 // 16),
            build_s=build,
            out_tokens=n_out,
        )
        log(
            f"{name}: {n_out / wall:.0f} output tok/s ({n_out} tokens in {wall:.2f}s), pool {nb} blocks "
            f"-> {nb // 256} requests of 4k resident (build {build:.0f}s)"
        )
        del eng
        gc.collect()
        torch.cuda.empty_cache()
    if "bf16" in rows:
        b = rows["bf16"]
        log(
            "| KV | output tok/s | vs bf16 | pool blocks | 4k-context requests resident | vs bf16 |"
        )
        log("|---|---|---|---|---|---|")
        for k, r in rows.items():
            log(
                f"| {k} | {r['tok_s']:.0f} | {r['tok_s'] / b['tok_s']:.2f}x | {r['blocks']} | "
                f"{r['resident_4k']} | {r['resident_4k'] / b['resident_4k']:.2f}x |"
            )
    RES["engine"] = rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--parts", default="check,quant,engine,sweep")
    ap.add_argument("--explore", action="store_true", help="grid per sweep row under 0.9 of SDPA")
    ap.add_argument("--explore-quant", action="store_true", help="grid per quantized decode shape")
    ap.add_argument("--tune", action="store_true", help="the variant grid -> tune.json (then exit)")
    ap.add_argument("--budget", type=float, default=480.0, help="seconds for the whole run")
    ap.add_argument("--models", default=".bench_models")
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    args = ap.parse_args()
    t_end = time.time() + args.budget
    device = torch.device("cuda")
    import triton

    log(
        f"{time.strftime('%Y-%m-%d %H:%M:%S')} {torch.cuda.get_device_name()} torch {torch.__version__} triton {triton.__version__}"
    )
    parts = args.parts.split(",")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    sm = torch.cuda.get_device_properties(device).multi_processor_count
    rows: list = []
    try:
        if args.tune:
            ok = conversion_check(device)
            log("CHECKS " + ("passed" if ok else "FAILED"))
            tune(device, t_end, out)
            return 0
        import multiprocessing as mp

        if os.environ.get("BENCH_LOG_INFO"):
            import logging

            logging.basicConfig(level=logging.INFO, format="%(message)s")
        if parts == ["engine"]:  # the engine compiles what it runs; nothing else to prepare
            engine_run(device, Path(args.models) / "llama3-8b-shape", t_end)
            return 0
        proc = None
        if "check" in parts:  # its compiles run beside the parallel precompile
            q = mp.get_context("spawn").Queue()
            proc = mp.get_context("spawn").Process(target=_check_process, args=(q,))
            proc.start()
        if any(x in parts for x in ("s3", "s3b", "s3c", "s3d")):
            groups = s3_groups(sm, b="s3b" in parts, c="s3c" in parts, dd="s3d" in parts)
        elif "run3" in parts:
            groups = run3_groups(sm)
        else:
            groups = tune_groups(sm, final=True)
        precompile(groups)
        if proc is not None:
            ok, lines = q.get()
            proc.join()
            for line in lines:
                log(line)
            if not ok:
                log("CORRECTNESS FAILED")
                return 1
        if not conversion_check(device):
            log("CORRECTNESS FAILED")
            return 1
        if "s3d" in parts:
            table = []
            summary = s3_quant_grid(device, sm, t_end - 60, table, variants=s3d_quant_variants)
            g = torch.Generator(device=device).manual_seed(13)
            for h, hkv, d, batch, ctx in S3D_BF16_ROWS:
                _sweep_row((batch, ctx, h, hkv, d), device, g, s3d_bf16_variants, sm, table, t_end)
            (out / "s3d_grid.json").write_text(json.dumps(table, default=str))
            print_s3(summary)
            RES["s3_summary"] = summary
        if "s3c" in parts:
            table = []
            summary = s3c_grid(device, sm, t_end - 200, table)
            (out / "s3c_grid.json").write_text(json.dumps(table, default=str))
            print_s3(summary)
            RES["s3_summary"] = summary
        if "s3" in parts or "s3b" in parts:
            b = "s3b" in parts
            table = []
            summary = s3_quant_grid(device, sm, t_end - 150, table, b=b)
            if b:
                g = torch.Generator(device=device).manual_seed(10)
                for h, hkv, d, batch, ctx in S3B_WIDE_ROWS:
                    row = (batch, ctx, h, hkv, d)
                    _sweep_row(row, device, g, s3b_wide_variants, sm, table, t_end - 150)
            (out / "s3_grid.json").write_text(json.dumps(table, default=str))
            print_s3(summary)
            RES["s3_summary"] = summary
            sdpa_kernels(device)
        if "quant" in parts:
            quant_table(device, False)
            if "run3" not in parts:
                table: list = []
                quant_grid(device, sm, time.time() + 25, table)
                (out / "quant_grid.json").write_text(json.dumps(table, default=str))
        if "sweep" in parts:
            rows = sweep(device, args.explore, t_end - (150 if "engine" in parts else 0))
            print_sweep(rows)
            rows = []
        if "engine" in parts:
            try:
                engine_run(device, Path(args.models) / "llama3-8b-shape", t_end)
            except Exception as exc:  # noqa: BLE001
                import traceback

                log(f"engine run failed: {type(exc).__name__}: {exc}")
                log(traceback.format_exc()[-1500:])
        if "run3" in parts:  # after the tables: the grids get what time is left
            table = []
            quant_small_grid(device, sm, t_end - 14, table)
            worst_rows_grid(device, sm, t_end, table)
            (out / "run3_grid.json").write_text(json.dumps(table, default=str))
    except Exception as exc:  # noqa: BLE001
        import traceback

        log(f"run failed: {type(exc).__name__}: {exc}")
        log(traceback.format_exc()[-2000:])
    finally:
        print_sweep(rows)
        if RES.get("s3_summary"):
            print_s3(RES["s3_summary"])
        (out / "kv_gpu.json").write_text(json.dumps(RES, indent=1, default=str))
        (out / "kv_gpu.log").write_text("\n".join(LOG) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
