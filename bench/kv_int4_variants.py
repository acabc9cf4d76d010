"""INT4 KV decode on the GPU: every variant of the split-half program checked and timed in one
process, against bf16 and INT8 on the same Triton kernel family and the byte floor.

Variants (``paged_attention(int4_variant=(INT4_CVT, INT4_FOLD))``,
:mod:`local_engine.attention.triton_int4`): ``INT4_CVT`` 0 = the per-element nibble select
over the whole head dim (the kernel before 2026-12-03), 1 = magic-number operands by Triton
bit operations, 2 = the same by inline PTX ``prmt``; ``FOLD`` = the code offset subtracted per
row. Tiles: ``keys/warps/stages``. The 2026-12-03 H200 call that chose ``(2, True)`` also
timed an int8-conversion operand, a query rotation inside the kernel and a lazy softmax
rescale; the rotation gave wrong results compiled, the three are gone (bench/RESULTS.md).

Steps (32 query / 8 KV heads, head_dim 128, block 16, bf16 queries):

1. Stage 1: every variant at the current rule's tile (32/1/3) and at 64/4/2; stage 2: the two
   fastest variants (64 x 4,096) over more tiles; stage 3: the fastest over split-K segment
   counts (half and twice the rule's). A time budget (``--budget`` s) cuts stages 2-3 short.
2. Correctness of every timed (variant, tile, segments): decode-shaped batches (6 sequences,
   contexts 1 .. 4,100 in random blocks, an outlier key channel) and, per variant, a mixed
   prefill/decode batch, against float64 attention over the dequantized cache (keys rotated
   back); outputs and split-K scratch poisoned (NaN) first. Pass: relative error < 1e-2 (bf16
   queries and probabilities: ~3e-3 expected) and every output written.
3. Prefill (8 x 512 new tokens over a 4,096 prefix): the old kernel and the fastest variant,
   bf16 as the peer.
4. Speed: median of CUDA-graph replays (10 calls each, :func:`kernels.capture`), INT4's query
   rotation included; floor = the pool's bytes over this GPU's copy bandwidth, measured here.

Usage: ``PYTHONPATH=. python bench/kv_int4_variants.py [--budget 300] [--out DIR]``. Prints the
table last; writes ``int4_variants.json`` under ``--out``.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import kernels  # noqa: E402
import kv_lowbit_gpu as lowbit  # noqa: E402
import torch  # noqa: E402

from local_engine.attention import triton_backend as tb  # noqa: E402
from local_engine.attention.triton_backend import KernelConfig  # noqa: E402

SHAPES = [(64, 4096), (16, 32768)]
VARIANTS = [(0, False), (1, True), (1, False), (2, True), (2, False)]
DEC_CASE = ([1, 17, 300, 1000, 2500, 4100], [1] * 6)  # contexts, new tokens
MIX_CASE = ([700, 33, 1500, 130], [1, 33, 1, 7])
PREFILL = (8, 512, 4096)  # sequences, new tokens, cached prefix (bench/kernels.py's shape)
STAGE1_TILES = [(32, 1, 3), (64, 4, 2)]
STAGE2_TILES = [(32, 2, 3), (64, 2, 3), (64, 4, 3), (128, 4, 2), (128, 8, 2), (32, 1, 2)]
TOL = 1e-2


def vname(v) -> str:
    """A variant's short name: its conversion (``cvt<k>``), ``+fold`` when the offset is folded."""
    return f"cvt{v[0]}{'+fold' if v[1] else ''}"


def cfg_of(tile) -> KernelConfig:
    """The decode kernel's config for ``tile`` = (block N, warps, stages), 16 rows."""
    return KernelConfig(16, tile[0], tile[1], tile[2])


def rule_segments(batch, ctx, tile) -> int:
    """The launcher's split-K choice for this tile (``choose_num_segments``)."""
    cfg = cfg_of(tile)
    tile_bytes = tb.split_tile_bytes(cfg, lowbit.D, 1, True)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    return tb.choose_num_segments(batch * lowbit.HKV, ctx, sms, cfg.tile_n, tile_bytes)


class Poison:
    """Replaces ``triton_backend._alloc`` with NaN-filled buffers while active."""

    def __enter__(self):
        self.old = tb._alloc
        tb._alloc = lambda shape, dtype, device: torch.full(
            shape, float("nan"), dtype=dtype, device=device
        )

    def __exit__(self, *exc):
        tb._alloc = self.old


def make_case(dev, g, ctx_lens, q_lens):
    """INT4 pool with sequences in random blocks; returns the call's tensors and the float64
    reference over the dequantized cache (keys rotated back)."""
    bs = lowbit.BS
    n_blocks = [-(-c // bs) for c in ctx_lens]
    total = sum(n_blocks) + 2
    _, kc, vc, ks, vs = lowbit.pool("int4", total, dev)
    perm = torch.randperm(total, generator=g).tolist()
    tables = torch.zeros((len(ctx_lens), max(n_blocks)), dtype=torch.int32)
    rows = []
    for i, (c, n) in enumerate(zip(ctx_lens, n_blocks)):
        blocks = [perm.pop() for _ in range(n)]
        tables[i, :n] = torch.tensor(blocks)
        slot = torch.tensor([blocks[p // bs] * bs + p % bs for p in range(c)]).to(dev)
        k = torch.randn((c, lowbit.HKV, lowbit.D), generator=g)
        k[..., 3] *= 15
        v = torch.randn((c, lowbit.HKV, lowbit.D), generator=g) * 0.5
        tb.write_kv_cache(
            k.to(dev, torch.bfloat16), v.to(dev, torch.bfloat16), kc, vc, slot, ks, vs
        )
        rows.append(blocks)
    q = torch.randn((sum(q_lens), lowbit.HQ, lowbit.D), generator=g).to(dev, torch.bfloat16)
    cu = torch.tensor([0] + list(torch.tensor(q_lens).cumsum(0)), dtype=torch.int32)
    ref = []
    for i, (c, ql) in enumerate(zip(ctx_lens, q_lens)):
        kd, vd = lowbit.dequantized("int4", kc, vc, ks, vs, rows[i], c, dev)
        ref.append(lowbit.dense(q[cu[i] : cu[i + 1]].double(), kd, vd, c, ql))
    lens = torch.tensor(ctx_lens, dtype=torch.int32)
    args = (q, kc, vc, tables.to(dev), cu.to(dev), lens.to(dev))
    return args, dict(k_scale=ks, v_scale=vs), torch.cat(ref)


def check(case, variant, tile, segments) -> float:
    """Relative error of one launch against the float64 reference (inf if NaN / unwritten)."""
    args, kw, ref = case
    cfg = None if tile is None else cfg_of(tile)
    with Poison():
        out = tb.paged_attention(
            *args,
            **kw,
            config=cfg,
            num_segments=segments,
            int4_variant=variant,
            decode_kernel="triton",
        )
    torch.cuda.synchronize()
    if out.isnan().any():
        return float("inf")
    return float((out.double() - ref).norm() / ref.norm())


def timed(args, kw, **extra) -> float:
    """Seconds per call of the Triton decode on ``args``/``kw`` (``kernels.bench``, CUDA events)."""
    fn = functools.partial(tb.paged_attention, *args, **kw, decode_kernel="triton", **extra)
    return kernels.bench(fn)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--budget", type=float, default=300.0)
    ap.add_argument("--out", default=".")
    a = ap.parse_args()
    t_start = time.time()
    dev = torch.device("cuda")
    print(f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {torch.cuda.get_device_name()}")
    bw = lowbit.copy_bandwidth(dev)
    print(f"copy bandwidth (4 GiB device copy): {bw:.0f} GB/s", flush=True)
    g = torch.Generator().manual_seed(7)
    dec_case = make_case(dev, g, *DEC_CASE)
    mix_case = make_case(dev, g, *MIX_CASE)
    rows, errs = [], {}
    base: dict = {}
    pools = {}
    for batch, ctx in SHAPES:
        for name in ("auto", "int8", "int4"):
            raw, kc, vc, ks, vs = lowbit.filled_pool(name, batch, ctx, dev, lowbit.HKV, lowbit.D)
            n_blocks = batch * ctx // lowbit.BS
            tables = torch.arange(n_blocks, dtype=torch.int32, device=dev).view(batch, -1)
            q = torch.randn((batch, lowbit.HQ, lowbit.D), device=dev, dtype=torch.bfloat16)
            cu = torch.arange(batch + 1, dtype=torch.int32, device=dev)
            lens = torch.full((batch,), ctx, dtype=torch.int32, device=dev)
            floor = raw.numel() * raw.element_size() / (bw * 1e9) * 1e3
            kw = dict(k_scale=ks, v_scale=vs) if name != "auto" else {}
            pools[(batch, ctx, name)] = ((q, kc, vc, tables, cu, lens), kw, floor, raw)
            if name != "int4":
                ms = timed((q, kc, vc, tables, cu, lens), kw)
                label = "bf16" if name == "auto" else name
                base.setdefault((batch, ctx), ms)
                rows.append((label, "rule", batch, ctx, None, ms, floor, None))
                print(f"{label} {batch}x{ctx}: {ms:.4f} ms (floor {floor:.4f})", flush=True)
                del pools[(batch, ctx, name)]
                del raw, kc, vc, ks, vs
                torch.cuda.empty_cache()

    def run(variant, tile, seg_mult=1.0):
        for batch, ctx in SHAPES:
            args, kw, floor, _ = pools[(batch, ctx, "int4")]
            segs = max(1, int(rule_segments(batch, ctx, tile) * seg_mult))
            key = (variant, tile, segs > 1)
            if key not in errs:
                try:
                    e_dec = check(dec_case, variant, tile, segs)
                    e_mix = check(mix_case, variant, None, None) if variant not in errs else 0.0
                    errs[variant] = max(errs.get(variant, 0.0), e_mix)
                    errs[key] = max(e_dec, errs[variant])
                except Exception as e:  # noqa: BLE001 - a variant that fails is reported
                    print(f"{vname(variant)} {tile}: FAILED {type(e).__name__}: {str(e)[:400]}")
                    errs[key] = float("inf")
            if errs[key] > TOL:
                rows.append(
                    (vname(variant), tile, batch, ctx, segs, float("nan"), floor, errs[key])
                )
                continue
            try:
                ms = timed(args, kw, config=cfg_of(tile), num_segments=segs, int4_variant=variant)
            except Exception as e:  # noqa: BLE001 - reported, the sweep goes on
                print(f"{vname(variant)} {tile}: timing FAILED {type(e).__name__}: {str(e)[:300]}")
                ms = float("nan")
            rows.append((vname(variant), tile, batch, ctx, segs, ms, floor, errs[key]))
            print(
                f"{vname(variant)} {tile} {batch}x{ctx} seg {segs}: {ms:.4f} ms "
                f"{base[(batch, ctx)] / ms:.2f}x bf16, err {errs[key]:.2e}",
                flush=True,
            )

    for v in VARIANTS:
        for tile in STAGE1_TILES:
            run(v, tile)
    print(f"\nstage 1 done at {time.time() - t_start:.0f} s")
    print_table(rows, base)

    def best_of(pred):
        r = [x for x in rows if tuple(x[2:4]) == SHAPES[0] and x[4] is not None and pred(x)]
        r = [x for x in r if x[5] == x[5]]
        return sorted(r, key=lambda x: x[5])

    ranked = best_of(lambda x: True)
    top = []
    for x in ranked:
        v = next(v for v in VARIANTS if vname(v) == x[0])
        if v not in top:
            top.append(v)
    for v in top[:2]:
        for tile in STAGE2_TILES:
            if time.time() - t_start > a.budget:
                break
            run(v, tile)
    ranked = best_of(lambda x: True)
    if ranked and time.time() - t_start < a.budget:
        bv = next(v for v in VARIANTS if vname(v) == ranked[0][0])
        for mult in (0.5, 2.0):
            run(bv, ranked[0][1], mult)
    if ranked and time.time() - t_start < a.budget + 60:
        bv = next(v for v in VARIANTS if vname(v) == ranked[0][0])
        prefill(dev, [VARIANTS[0], bv], rows)
    Path(a.out).mkdir(parents=True, exist_ok=True)
    with open(Path(a.out) / "int4_variants.json", "w") as f:
        json.dump([list(map(str, r)) for r in rows], f, indent=1)
    print(f"\nelapsed {time.time() - t_start:.0f} s; relative error tolerance {TOL}")
    print_table(rows, base)


def prefill(dev, variants, rows) -> None:
    """Prefill-shaped calls (the launcher's prefill tiles): :data:`PREFILL` sequences of new
    tokens over a cached prefix, per variant (its mixed-batch check ran in ``run``); bf16 on
    the same shape as the peer."""
    seqs, new, prefix = PREFILL
    ctx = prefix + new
    res = {}
    for name in ("auto", "int4"):
        raw, kc, vc, ks, vs = lowbit.filled_pool(name, seqs, ctx, dev, lowbit.HKV, lowbit.D)
        tables = torch.arange(seqs * ctx // lowbit.BS, dtype=torch.int32, device=dev)
        q = torch.randn((seqs * new, lowbit.HQ, lowbit.D), device=dev, dtype=torch.bfloat16)
        cu = torch.arange(0, seqs * new + 1, new, dtype=torch.int32, device=dev)
        lens = torch.full((seqs,), ctx, dtype=torch.int32, device=dev)
        args = (q, kc, vc, tables.view(seqs, -1), cu, lens)
        kw = dict(k_scale=ks, v_scale=vs) if name != "auto" else {}
        for v in variants if name == "int4" else [None]:
            try:
                extra = {} if v is None else dict(int4_variant=v)
                res[v] = timed(args, kw, **extra)
            except Exception as e:  # noqa: BLE001 - reported
                print(f"prefill {v}: FAILED {type(e).__name__}: {str(e)[:300]}")
                continue
            label = "bf16" if v is None else vname(v)
            print(f"prefill {seqs}x{new} over {prefix}: {label} {res[v]:.4f} ms", flush=True)
            rows.append((label, "prefill", seqs, ctx, None, res[v], float("nan"), None))
        del raw, kc, vc, ks, vs
        torch.cuda.empty_cache()


def print_table(rows, base, top: int = 8) -> None:
    """Per shape: bf16, int8, the old kernel at the rule's tile, the ``top`` fastest INT4
    rows, and every INT4 row that failed its check."""
    print("| variant | tiles | shape | segs | ms | vs bf16 | floor / ms | rel. error |")
    print("|---|---|---|---:|---:|---:|---:|---:|")
    for shape in SHAPES:
        mine = [r for r in rows if tuple(r[2:4]) == shape]
        peers = [r for r in mine if r[4] is None]
        int4 = sorted((r for r in mine if r[4] is not None and r[5] == r[5]), key=lambda r: r[5])
        old = [r for r in int4 if r[0] == "cvt0" and r[1] == STAGE1_TILES[0]][:1]
        bad = [r for r in mine if r[4] is not None and r[5] != r[5]]
        shown = peers + old + [r for r in int4[:top] if r not in old] + bad
        for label, tile, batch, ctx, segs, ms, floor, err in shown:
            if tile == "prefill":
                continue
            tiles = tile if isinstance(tile, str) else "/".join(map(str, tile))
            ratio = base[(batch, ctx)] / ms if ms == ms else float("nan")
            print(
                f"| {label} | {tiles} | {batch}x{ctx} | {segs or ''} | {ms:.4f} | "
                f"{ratio:.2f}x | {floor / ms:.2f} | {'' if err is None else f'{err:.1e}'} |"
            )
    pre = [r for r in rows if r[1] == "prefill"]
    if pre:
        bf = next((r[5] for r in pre if r[0] == "bf16"), float("nan"))
        for r in pre:
            print(
                f"| {r[0]} | prefill | {PREFILL[0]}x{PREFILL[1]} over {PREFILL[2]} | | "
                f"{r[5]:.4f} | {bf / r[5]:.2f}x | | |"
            )


if __name__ == "__main__":
    main()
