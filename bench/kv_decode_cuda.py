"""The CUDA decode kernel for 1-byte KV caches (local_engine/attention/cuda_decode.py) on a GPU.

One process, in this order:

1. ``check``: every compiled configuration (``--variants``, built into the kernel cache first)
   on ragged decode batches (contexts 1 .. 4111, some ending mid-block with NaN bytes past the
   context, a decode-shaped batch whose ``cu_seqlens_q`` is not ``arange``), groups 1, 2, 4, 7
   and 8, head_dim 64 and 128, INT8 and FP8, split-K 1 / 3 / the rule, against the torch
   reference on the same quantized pool (relative error, tolerance 2e-2, and no NaN), and
   against the Triton kernel's output.
2. ``time``: decode at 64 x 4096, 16 x 32768 and 256 x 1024, 32 query / 8 KV heads, d128 (the
   issue's shapes), plus the other head layouts at 16 x 32768 / 64 x 4096: bf16 on the Triton
   rule (the peer), INT8 / FP8 on the Triton 1-byte rule and on every CUDA configuration x
   segments (rule / 2, rule, rule x 2); ms (median of CUDA-graph replays), TB/s of the bytes
   read (values + float32 scales), speed vs bf16; every timed CUDA launch checked against the
   reference. The physical floor is the copy bandwidth measured in the same run.

   Two ragged batches (64 x ~4096, 256 x ~1024: contexts uniform in [ctx / 4, 7 ctx / 4]) too,
   and 66 x 4096 / 33 x 8192 (items a multiple of the H200's 132 SMs: the SM-load probe).
   ``TIME_SHAPES=64x4096,66x4096``: the rows of those batch x context sizes only (every head
   layout, uniform and ragged); ``TIME_SEGMENTS=3,9``: these segment counts too, on every
   configuration; ``TIME_CAPS=1``: each configuration also at 1 .. (what fits - 1) CTAs per
   SM (``DecodeConfig.ctas_per_sm``).
3. ``seeds`` (only when named in ``--parts``): five 1 x 32768 bf16 rows on ``SEED_COUNT``
   other pools (data and block permutation) and on blocks in order: the rule's whole call
   and the split kernel alone (``SEED_TRITON=1``: the Triton kernel timed first, as
   ``sweep16`` does).
4. ``sweep16``: the bf16 layout sweep against SDPA (``SWEEP_RULE_ONLY=1``: the rule's
   configuration only; ``SWEEP_SHAPES=1x32768,8x8192``: some batch x context columns only);
   ``SWEEP_REPEAT=2``: the rule's first graph timed three more times at once, then two more
   rounds of SDPA, the rule and the kernel alone on fresh graphs, then the row's first SDPA
   and rule graphs timed again.

Usage: ``python3 bench/kv_decode_cuda.py --out $OUT [--variants "2,4,3;4,4,2"] [--parts check,time]``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.kernels import bench, make_paged, time_replays  # noqa: E402
from bench.kv_gpu import LOG, Decode, log, quantized_pool, rel  # noqa: E402

RES: dict = {"check": [], "time": []}
CAPS = os.environ.get("TIME_CAPS") == "1"


def env_shapes(name: str) -> list[tuple[int, int]]:
    """``$name`` (``"64x4096,1x32768"``) as ``[(batch, context), ...]``; empty when unset.

    Raises:
        SystemExit: an entry that is not ``BATCHxCONTEXT``."""
    out = []
    for part in filter(None, os.environ.get(name, "").split(",")):
        try:
            b, c = part.lower().split("x")
            out.append((int(b), int(c)))
        except ValueError:
            raise SystemExit(f"{name}: {part!r} is not BATCHxCONTEXT (e.g. 64x4096)") from None
    return out


BS = 16


def check(device, configs) -> bool:
    from local_engine.attention import torch_ref
    from local_engine.attention import triton_backend as tb
    from local_engine.attention.cuda_decode import MAX_SMEM, DecodeConfig

    log("## correctness: CUDA kernel vs torch reference (same quantized pool)")
    g = torch.Generator(device=device).manual_seed(11)
    ok = True
    layouts = (
        (32, 8, 128),
        (28, 4, 128),
        (32, 32, 128),
        (16, 2, 128),
        (9, 3, 64),
        (32, 4, 64),
        (8, 8, 64),
    )
    for fmt in ("int8", "fp8"):
        for h, hkv, d in layouts:
            ctx = [700, 33, 1, 260, 17, 4111, 64, 95]
            k, v, bt = make_paged(ctx, hkv, d, BS, torch.bfloat16, device, g)
            k = k * 2.0
            kc, vc, ks, vs = quantized_pool(k, v, fmt)
            # bytes past each context in its last block: NaN patterns (E4M3 0x7F) / junk
            for i, c in enumerate(ctx):
                if c % BS:
                    blk = int(bt[i, c // BS])
                    kc.view(torch.uint8)[blk, c % BS :] = 0x7F
                    vc.view(torch.uint8)[blk, c % BS :] = 0x7F
            btr = torch.where(bt >= kc.shape[0], 0, bt)
            n = len(ctx)
            q = torch.randn(n, h, d, generator=g, device=device).to(torch.bfloat16)
            cus = {
                "arange": torch.arange(n + 1, dtype=torch.int32, device=device),
                # decode-shaped but not one token each: seq 1 has 0 tokens, seq 3 has 2
                "ragged": torch.tensor(
                    [0, 1, 1, 2, 4, 5, 6, 7, 8], dtype=torch.int32, device=device
                ),
            }
            sl = torch.tensor(ctx, dtype=torch.int32, device=device)
            for cu_name, cu in cus.items():
                ref = torch_ref.paged_attention(q, kc, vc, btr, cu, sl, k_scale=ks, v_scale=vs)
                tri = tb.paged_attention(
                    q, kc, vc, bt, cu, sl, k_scale=ks, v_scale=vs, decode_kernel="triton"
                )
                for steps, warps, stages in configs:
                    if steps < 2:
                        continue  # 16-bit caches only
                    for nseg in (1, 3, None):
                        cfg = DecodeConfig(steps, warps, stages)
                        out = tb.paged_attention(
                            q,
                            kc,
                            vc,
                            bt,
                            cu,
                            sl,
                            k_scale=ks,
                            v_scale=vs,
                            decode_kernel="cuda",
                            cuda_config=cfg,
                            num_segments=nseg,
                        )
                        e, et = rel(out, ref), rel(out, tri)
                        nan = bool(out.isnan().any())
                        good = e < 2e-2 and not nan
                        ok &= good
                        RES["check"].append(
                            dict(
                                fmt=fmt,
                                heads=f"{h}/{hkv}",
                                d=d,
                                cu=cu_name,
                                cfg=[steps, warps, stages],
                                nseg=nseg,
                                err_ref=e,
                                err_triton=et,
                                nan=nan,
                                ok=good,
                            )
                        )
                        if not good or (steps, warps, stages, nseg) == (*configs[0], None):
                            log(
                                f"{fmt} {h}/{hkv} d{d} cu={cu_name} cfg={steps},{warps},{stages} nseg={nseg}: "
                                f"rel err vs ref {e:.2e}, vs triton {et:.2e}{' NaN' if nan else ''} {'ok' if good else 'FAIL'}"
                            )
    # fp16 queries (the other instantiation)
    h, hkv, d = 32, 8, 128
    k, v, bt = make_paged([300, 77], hkv, d, BS, torch.bfloat16, device, g)
    kc, vc, ks, vs = quantized_pool(k, v, "int8")
    q = torch.randn(2, h, d, generator=g, device=device).to(torch.float16)
    cu = torch.arange(3, dtype=torch.int32, device=device)
    sl = torch.tensor([300, 77], dtype=torch.int32, device=device)
    btr = torch.where(bt >= kc.shape[0], 0, bt)
    ref = torch_ref.paged_attention(q, kc, vc, btr, cu, sl, k_scale=ks, v_scale=vs)
    out = tb.paged_attention(q, kc, vc, bt, cu, sl, k_scale=ks, v_scale=vs, decode_kernel="cuda")
    e = rel(out, ref)
    ok &= e < 2e-2
    log(f"fp16 queries int8: rel err {e:.2e} {'ok' if e < 2e-2 else 'FAIL'}")
    # 16-bit (bf16) caches: NaN in the rows past each context (stale slots may hold anything)
    for h, hkv, d in layouts:
        ctx = [700, 33, 1, 260, 17, 4111, 64, 95]
        k, v, bt = make_paged(ctx, hkv, d, BS, torch.bfloat16, device, g)
        for i, c in enumerate(ctx):
            if c % BS:
                blk = int(bt[i, c // BS])
                k[blk, c % BS :] = float("nan")
                v[blk, c % BS :] = float("nan")
        btr = torch.where(bt >= k.shape[0], 0, bt)
        q = torch.randn(len(ctx), h, d, generator=g, device=device).to(torch.bfloat16)
        sl = torch.tensor(ctx, dtype=torch.int32, device=device)
        cu = torch.arange(len(ctx) + 1, dtype=torch.int32, device=device)
        ref = torch_ref.paged_attention(q, k, v, btr, cu, sl)
        for steps, warps, stages in configs:
            if DecodeConfig(steps, warps, stages).smem_bytes(d, 2) > MAX_SMEM:
                continue
            for nseg in (1, 3, None):
                cfg = DecodeConfig(steps, warps, stages)
                out = tb.paged_attention(
                    q, k, v, bt, cu, sl, decode_kernel="cuda", cuda_config=cfg, num_segments=nseg
                )
                e = rel(out, ref)
                nan = bool(out.isnan().any())
                good = e < 2e-2 and not nan
                ok &= good
                RES["check"].append(
                    dict(
                        fmt="bf16",
                        heads=f"{h}/{hkv}",
                        d=d,
                        cu="arange",
                        cfg=[steps, warps, stages],
                        nseg=nseg,
                        err_ref=e,
                        nan=nan,
                        ok=good,
                    )
                )
                if not good or nseg is None and (steps, warps, stages) == (1, 8, 2):
                    log(
                        f"bf16 {h}/{hkv} d{d} cfg={steps},{warps},{stages} nseg={nseg}: rel err vs ref "
                        f"{e:.2e}{' NaN' if nan else ''} {'ok' if good else 'FAIL'}"
                    )
    n_bad = sum(not r["ok"] for r in RES["check"])
    worst = max(r["err_ref"] for r in RES["check"])
    log(f"checked {len(RES['check'])} launches, {n_bad} failed, worst rel err {worst:.2e}")
    return ok


def config_key(cfg) -> str:
    """``"steps,warps,stages;segments"`` (``"@c"`` added for ``ctas_per_sm`` c): a launch's
    key in the tables and the JSON."""
    cap = f"@{cfg.ctas_per_sm}" if cfg.ctas_per_sm else ""
    return f"{cfg.steps},{cfg.warps},{cfg.stages};{cfg.num_segments}{cap}"


def floors(device) -> tuple[float, float]:
    """(copy TB/s counting bytes read and written, read TB/s of an ``amax`` over 4 GB):
    device-to-device bandwidth measured in the same run."""
    a = torch.empty(2 << 30, dtype=torch.uint8, device=device)
    b = torch.empty_like(a)
    ms = bench(lambda: b.copy_(a), inner=5, reps=7)
    copy = 2 * a.numel() / (ms * 1e-3) / 1e12
    x = torch.randn(1 << 30, device=device)
    ms = bench(lambda: x.amax(), inner=5, reps=7)
    read = x.numel() * 4 / (ms * 1e-3) / 1e12
    return copy, read


def timing(device, configs, deadline: float) -> None:
    from local_engine.attention import torch_ref
    from local_engine.attention.cuda_decode import DecodeConfig, decode_config, launch_occupancy

    copy, read = floors(device)
    RES["floors"] = dict(copy_tbps=copy, read_tbps=read)
    log(f"## timing (this run: copy {copy:.2f} TB/s read + write, amax read {read:.2f} TB/s)")
    sm = torch.cuda.get_device_properties(device).multi_processor_count
    g = torch.Generator(device=device).manual_seed(1)
    shapes = [((32, 8, 128), (64, 4096)), ((32, 8, 128), (16, 32768)), ((32, 8, 128), (256, 1024))]
    # ragged batches (the engine's): contexts uniform in [ctx / 4, 7 ctx / 4], mean ctx
    shapes += [((32, 8, 128), (64, 4096, "ragged")), ((32, 8, 128), (256, 1024, "ragged"))]
    shapes += [((32, 8, 128), (256, 576))]  # the engine table's decode (512 + 64 tokens)
    # SM-load probes for 64 x 4k (512 items: 4 on some of 132 SMs, 3.88 on average): 528 and
    # 264 items split evenly over the SMs at 2 CTAs per SM; if these read near the floor and
    # 64 x 4k does not, the gap is the SM load (bench/RESULTS.md "## kvquant", session 5)
    shapes += [((32, 8, 128), (66, 4096)), ((32, 8, 128), (33, 8192))]
    shapes += [
        ((28, 4, 128), (16, 32768)),
        ((32, 32, 128), (64, 4096)),
        ((32, 8, 64), (64, 4096)),
        ((32, 8, 64), (16, 32768)),
        ((32, 4, 64), (16, 32768)),
        ((16, 2, 128), (16, 32768)),
    ]
    keep = env_shapes("TIME_SHAPES")
    if keep:
        shapes = [s for s in shapes if s[1][:2] in keep]
    extra_segs = {int(x) for x in os.environ.get("TIME_SEGMENTS", "").split(",") if x.strip()}
    for (h, hkv, d), (batch, ctx, *kind) in shapes:
        if time.time() > deadline:
            log("(deadline: timing stopped)")
            break
        lens = None
        if kind:
            gl = torch.Generator().manual_seed(batch)
            lens = torch.randint(ctx // 4, 7 * ctx // 4 + 1, (batch,), generator=gl).tolist()
        pb = Decode(batch, ctx, h, hkv, d, device, g, "bf16", ctx_lens=lens)
        t_bf16 = bench(pb.triton(decode_kernel="triton"))
        t_bf16_cuda = bench(pb.triton(decode_kernel="cuda"))
        bytes_bf16 = pb.bytes
        del pb
        torch.cuda.empty_cache()
        for fmt in ("int8", "fp8"):
            p = Decode(batch, ctx, h, hkv, d, device, g, fmt, ctx_lens=lens)
            t_tri = bench(p.triton(decode_kernel="triton"))
            # reference on a few sequences only (the whole batch's torch reference is slow)
            nref = min(batch, 4)
            btr = torch.where(p.bt >= p.k.shape[0], 0, p.bt)[:nref]
            ref = torch_ref.paged_attention(
                p.q[:nref], p.k, p.v, btr, p.cu[: nref + 1], p.sl[:nref], k_scale=p.ks, v_scale=p.vs
            )
            rule = decode_config(batch, hkv, d, p.bt.shape[1] * BS, sm)
            row = dict(
                bf16_cuda_ms=t_bf16_cuda,
                heads=f"{h}/{hkv}",
                d=d,
                shape=f"{batch}x{ctx}{' ragged' if kind else ''}",
                fmt=fmt,
                bf16_ms=t_bf16,
                bf16_tbps=bytes_bf16 / t_bf16 / 1e9,
                triton_ms=t_tri,
                bytes=p.bytes,
                rule=config_key(rule),
                cuda={},
            )
            best = None
            occ_args = (p.q, p.k, p.v, p.ks, p.vs, p.bt, p.cu, p.sl)
            for steps, warps, stages in configs:
                base = DecodeConfig(steps, warps, stages)
                r = decode_config(batch, hkv, d, p.bt.shape[1] * BS, sm, base).num_segments
                launches = [
                    DecodeConfig(steps, warps, stages, nseg)
                    for nseg in sorted({max(1, r // 2), r, r * 2} | extra_segs)
                ]
                if CAPS:  # fewer CTAs per SM than fit
                    fits = launch_occupancy(*occ_args, base)
                    launches += [DecodeConfig(steps, warps, stages, r, c) for c in range(1, fits)]
                for cfg in launches:
                    if cfg.ctas_per_sm:
                        got = launch_occupancy(*occ_args, cfg)
                        if got != cfg.ctas_per_sm:
                            log(f"ctas_per_sm {cfg.ctas_per_sm} gave {got} CTAs per SM: {cfg}")
                    fn = p.triton(decode_kernel="cuda", cuda_config=cfg)
                    out = fn()
                    e = rel(out[:nref], ref)
                    ms = bench(fn)
                    key = config_key(cfg)
                    row["cuda"][key] = dict(ms=ms, err=e)
                    if e < 2e-2 and (best is None or ms < best[1]):
                        best = (key, ms)
            t_rule = row["cuda"].get(config_key(rule), {}).get("ms")
            row["rule_ms"] = t_rule
            row["best"] = best
            RES["time"].append(row)
            tb_rule = p.bytes / t_rule / 1e9 if t_rule else float("nan")
            log(
                f"| {h}/{hkv} d{d} {row['shape']} {fmt} | bf16 {t_bf16:.4f} ms ({row['bf16_tbps']:.2f} TB/s), bf16 CUDA {t_bf16_cuda:.4f} | "
                f"triton-1B {t_tri:.4f} ({t_bf16 / t_tri:.2f}x) | cuda rule {config_key(rule)} "
                f"{t_rule or float('nan'):.4f} ms {tb_rule:.2f} TB/s ({t_bf16 / t_rule if t_rule else 0:.2f}x) | "
                f"best {best[0] if best else '-'} {best[1] if best else float('nan'):.4f} ({t_bf16 / best[1] if best else 0:.2f}x)"
            )
            del p
            torch.cuda.empty_cache()


LAYOUTS = [(32, 32), (32, 16), (32, 8), (28, 4), (32, 4)]
RULE_ONLY = os.environ.get("SWEEP_RULE_ONLY") == "1"  # time the rule's configuration only
REPEAT = int(os.environ.get("SWEEP_REPEAT", "0"))  # more timing rounds of every row
SWEEP_SHAPES = [(1, 32768), (8, 8192), (32, 8192), (256, 1024)]
SWEEP_SHAPES = env_shapes("SWEEP_SHAPES") or SWEEP_SHAPES  # re-time some columns only


def sweep16(device, configs, deadline: float) -> None:
    """bf16 decode: the Triton rule and every 16-bit CUDA configuration x segments against
    SDPA on contiguous caches (the issue's layout sweep)."""
    from local_engine.attention.cuda_decode import MAX_SMEM, DecodeConfig, decode_config

    log("## bf16 layout sweep: Triton and the CUDA kernel against SDPA (contiguous caches)")
    sm = torch.cuda.get_device_properties(device).multi_processor_count
    g = torch.Generator(device=device).manual_seed(2)
    RES["sweep16"] = []
    for d in (128, 64):
        for h, hkv in LAYOUTS:
            for batch, ctx in SWEEP_SHAPES:
                if time.time() > deadline:
                    log("(deadline: sweep stopped)")
                    return
                p = Decode(batch, ctx, h, hkv, d, device, g, "bf16", with_dense=True)
                first: list = []  # the first replays of SDPA and of the rule, timed again below
                t_sdpa = bench(p.sdpa(), keep=first)
                tri_out = p.triton(decode_kernel="triton")()
                t_tri = bench(p.triton(decode_kernel="triton"))
                maxc = p.bt.shape[1] * BS
                rule = decode_config(batch, hkv, d, maxc, sm, elem_bytes=2)
                row = dict(
                    heads=f"{h}/{hkv}",
                    d=d,
                    shape=f"{batch}x{ctx}",
                    sdpa_ms=t_sdpa,
                    triton_ms=t_tri,
                    bytes=p.bytes,
                    rule=config_key(rule),
                    cuda={},
                )
                for steps, warps, stages in configs:
                    base = DecodeConfig(steps, warps, stages)
                    if base.smem_bytes(d, 2) > MAX_SMEM:
                        continue
                    if RULE_ONLY and (steps, warps, stages) != (
                        rule.steps,
                        rule.warps,
                        rule.stages,
                    ):
                        continue
                    r = decode_config(batch, hkv, d, maxc, sm, base, elem_bytes=2).num_segments
                    for nseg in [r] if RULE_ONLY else sorted({max(1, r // 2), r, r * 2}):
                        cfg = DecodeConfig(steps, warps, stages, nseg)
                        fn = p.triton(decode_kernel="cuda", cuda_config=cfg)
                        e = rel(fn(), tri_out)
                        ms = bench(fn, keep=first if cfg == rule else None)
                        row["cuda"][config_key(cfg)] = dict(ms=ms, err=e)
                ok = {k: v for k, v in row["cuda"].items() if v["err"] < 1e-2}
                best = min(ok.items(), key=lambda kv: kv[1]["ms"]) if ok else None
                key = config_key(rule)
                t_rule = row["cuda"].get(key, {}).get("ms")
                row["rule_ms"], row["best"] = t_rule, best and (best[0], best[1]["ms"])
                log(
                    f"| {h}/{hkv} | {d} | {batch}x{ctx} | SDPA {t_sdpa:.4f} | Triton {t_tri:.4f} "
                    f"({t_sdpa / t_tri:.2f}) | CUDA rule {key} {t_rule or float('nan'):.4f} "
                    f"({t_sdpa / t_rule if t_rule else 0:.2f}) | best {best[0] if best else '-'} "
                    f"{best[1]['ms'] if best else float('nan'):.4f} ({t_sdpa / best[1]['ms'] if best else 0:.2f}) |"
                )
                if REPEAT and len(first) == 2:
                    # the rule's first graph timed again at once, three times (a transient?)
                    row["retimes"] = [time_replays(first[1]) for _ in range(3)]
                    log(
                        "|   | first rule graph at once again: "
                        + " / ".join(f"{t:.4f} ({t_sdpa / t:.2f})" for t in row["retimes"])
                        + " |"
                    )
                    # SWEEP_REPEAT=n: n more rounds of SDPA, the rule and the kernel alone on fresh
                    # graphs, then the row's first two graphs replayed again
                    rounds = []
                    for _ in range(REPEAT):
                        t = split_times(p, rule, sm)
                        rounds.append(dict(sdpa=bench(p.sdpa()), **t))
                    again = dict(sdpa=time_replays(first[0]), rule=time_replays(first[1]))
                    row["rounds"], row["first_again"] = rounds, again
                    for t in rounds:
                        log(
                            f"|   | round: SDPA {t['sdpa']:.4f} | rule {t['rule']:.4f} "
                            f"({t['sdpa'] / t['rule']:.2f}) | alone {t['alone']:.4f} "
                            f"({t['sdpa'] / t['alone']:.2f}) |"
                        )
                    log(
                        f"|   | first graphs again: SDPA {again['sdpa']:.4f} | rule "
                        f"{again['rule']:.4f} ({again['sdpa'] / again['rule']:.2f}) |"
                    )
                RES["sweep16"].append(row)
                del p, first
                torch.cuda.empty_cache()


def split_times(p, rule, sm) -> dict:
    """ms of a launch of ``rule`` on decode problem ``p``: the whole call (``rule``: the kernel,
    and the Triton merge after it when split) and the kernel alone (``alone``: split
    launches write their partials, nothing merges them)."""
    from local_engine.attention import cuda_decode

    scale = p.d**-0.5 * 1.4426950408889634

    def alone():
        return cuda_decode.paged_decode(
            torch.empty_like(p.q), p.q, p.k, p.v, p.ks, p.vs, p.bt, p.cu, p.sl, scale, sm, rule
        )

    return dict(rule=bench(p.triton(decode_kernel="cuda", cuda_config=rule)), alone=bench(alone))


SEED_ROWS = [(32, 16, 128), (32, 8, 128), (32, 16, 64), (32, 32, 128), (32, 8, 64)]
SEED_TRITON = os.environ.get("SEED_TRITON") == "1"  # time the Triton kernel first, as sweep16


def seeds(device, deadline: float) -> None:
    """The 1 x 32768 bf16 rows on other pools: ``SEED_COUNT`` (default 6) seeds of the data and
    the block permutation, and blocks in order; SDPA, the CUDA rule (the kernel and the Triton
    merge), and the split kernel alone (partials only, no merge)."""
    from local_engine.attention.cuda_decode import decode_config

    n = int(os.environ.get("SEED_COUNT", "6"))
    log(
        "## 1 x 32768 bf16 rows by pool (seed of data and block permutation; 'in order': unshuffled)"
    )
    log("| layout | d | pool | SDPA ms | rule ms (ratio) | kernel alone ms (ratio) |")
    log("|---|---|---|---|---|---|")
    sm = torch.cuda.get_device_properties(device).multi_processor_count
    RES["seeds"] = []
    for h, hkv, d in SEED_ROWS:
        for seed in [*range(n), None]:
            if time.time() > deadline:
                log("(deadline: seeds stopped)")
                return
            g = torch.Generator(device=device).manual_seed(100 + (seed or 0))
            p = Decode(
                1, 32768, h, hkv, d, device, g, "bf16", with_dense=True, shuffle=seed is not None
            )
            t_sdpa = bench(p.sdpa())
            want = p.triton(decode_kernel="triton")()
            t_tri = bench(p.triton(decode_kernel="triton")) if SEED_TRITON else None
            rule = decode_config(1, hkv, d, p.bt.shape[1] * BS, sm, elem_bytes=2)
            err = rel(p.triton(decode_kernel="cuda", cuda_config=rule)(), want)
            t = split_times(p, rule, sm)
            t_rule, t_alone = t["rule"], t["alone"]
            pool = "in order" if seed is None else f"seed {seed}"
            RES["seeds"].append(
                dict(
                    heads=f"{h}/{hkv}",
                    d=d,
                    pool=pool,
                    sdpa_ms=t_sdpa,
                    triton_ms=t_tri,
                    rule_ms=t_rule,
                    alone_ms=t_alone,
                    err=err,
                    rule=config_key(rule),
                )
            )
            log(
                f"| {h}/{hkv} | {d} | {pool} | {t_sdpa:.4f} | {t_rule:.4f} ({t_sdpa / t_rule:.2f}) | "
                f"{t_alone:.4f} ({t_sdpa / t_alone:.2f}) |"
                + (f" err {err:.1e}!" if err > 1e-2 else "")
            )
            del p
            torch.cuda.empty_cache()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("."))
    ap.add_argument("--parts", default="check,time,sweep16")
    ap.add_argument(
        "--variants",
        default=os.environ.get(
            "PROMPTCACHE_DECODE_VARIANTS", "2,4,3;2,4,2;2,8,2;1,8,2;1,4,3;1,4,2"
        ),
    )
    ap.add_argument("--budget", type=float, default=400.0, help="seconds for the whole run")
    args = ap.parse_args()
    t0 = time.time()
    os.environ["PROMPTCACHE_DECODE_VARIANTS"] = args.variants
    import logging

    logging.basicConfig(level=logging.INFO, format="%(message)s")
    from local_engine.attention import cuda_decode

    device = torch.device("cuda")
    configs = list(cuda_decode.variants())
    tb0 = time.time()
    if not cuda_decode.available(device):
        log("CUDA decode kernel not available (see the log above)")
        return 1
    log(f"built/loaded in {time.time() - tb0:.1f} s: configs {configs}")
    parts = args.parts.split(",")
    args.out.mkdir(parents=True, exist_ok=True)
    ok = True
    try:
        if "check" in parts:
            ok = check(device, configs)
        if "time" in parts:
            timing(device, [c for c in configs if c[0] >= 2], t0 + args.budget)
        if "seeds" in parts:
            seeds(device, t0 + args.budget)
        if "sweep16" in parts:
            sweep16(device, configs, t0 + args.budget)
    finally:
        (args.out / "kv_decode_cuda.json").write_text(json.dumps(RES, indent=1))
        (args.out / "kv_decode_cuda.log").write_text("\n".join(LOG) + "\n")
    log(f"done in {time.time() - t0:.0f} s; correctness {'ok' if ok else 'FAILED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
