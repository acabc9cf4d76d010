"""Low-bit KV caches on the GPU (INT4 and KIVI-style int2): Triton correctness, decode speed
against bf16 and INT8 with the byte floor, and the 8B shape's resident 4k-token requests.

1. Correctness: the Triton KV write (int2: write + finalize) and paged attention over each pool
   (bf16 queries, a mixed decode/prefill batch, 32/8 heads, d128, an outlier key channel)
   against float64 attention over the dequantized cache and over the original values.
2. Decode speed, one layer, 32 query / 8 KV heads, head_dim 128, block 16, the Triton kernel for
   every format (``decode_kernel="triton"``: the CUDA decode kernel reads no packed format, so
   kernel against kernel), at 64 x 4,096 and 16 x 32,768 tokens; pools filled through each
   format's own write kernel (random bf16 K/V), time of one call: the median of CUDA-graph
   replays of 10 calls (:func:`kernels.bench`, as the engine's decode graphs run it; Python
   launch overhead out of every row; INT4/int2's query rotation included). Floor: the pool's
   bytes over this GPU's copy bandwidth measured in the same run (a 4 GiB device-to-device
   copy, read + write bytes / time). INT4 also runs the kernel before 2026-12-03 (``int4
   old``: the per-element nibble select, 32 keys / 1 warp; bench/kv_int4_variants.py has
   the variants); int2 a small tile sweep (keys per tile x warps): the rule's row and the best.
3. Residency, Llama-3-8B shape (32 layers, 8 KV heads, d128, bf16 weights 16.06 GB): the free
   device memory now minus the weights, times 0.9 (``gpu_memory_utilization``), over each
   format's block bytes (the allocator's :func:`kv_block_bytes`) -> blocks -> 4,096-token
   requests (256 blocks each); then the pool actually allocated (all 32 layers) to check it fits.

Usage: ``PYTHONPATH=. python bench/kv_lowbit_gpu.py [--iters 50] [--quick]`` (``--iters``:
eager calls timed on the CPU interpreter only) (``--quick``:
tiny shapes, for a CPU run under ``TRITON_INTERPRET=1``). Prints tables; asserts nothing.
"""

from __future__ import annotations

import argparse
import functools
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from local_engine.config import ModelConfig  # noqa: E402
from local_engine.kv_cache import int2  # noqa: E402
from local_engine.kv_cache.quant import (  # noqa: E402
    allocate_kv_cache,
    dequantize,
    hadamard,
    kv_cache_format,
)

HQ, HKV, D, BS = 32, 8, 128, 16
WEIGHTS_8B = 8_030_261_248 * 2  # Llama 3 8B parameters (local_engine.kv_plan) x bf16 bytes
FORMATS = ("auto", "int8", "int4", "int2")


#: int2's residual slots in the correctness pools (an open block each; kv_cache.int2)
INT2_SLOTS = 8


def pool(fmt_name: str, num_blocks: int, dev, heads=HKV, d=D, layers=1):
    mc = ModelConfig("bench", heads * d, layers, heads, heads, d, 8, 8)
    fmt = kv_cache_format(fmt_name, torch.bfloat16, dev)
    slots = INT2_SLOTS if fmt_name == "int2" else 0
    raw, views = allocate_kv_cache(mc, num_blocks, BS, fmt, dev, slots)
    layer = views[0]
    ks, vs = (layer[2], layer[3]) if len(layer) == 4 else (None, None)
    return raw, layer[0], layer[1], ks, vs


def dense(q, k, v, ctx, q_len):
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    s = torch.einsum("qhd,khd->hqk", q, k) * q.shape[-1] ** -0.5
    pos = torch.arange(ctx - q_len, ctx, device=q.device)[:, None]
    s = s.masked_fill(torch.arange(ctx, device=q.device)[None, :] > pos, float("-inf"))
    return torch.einsum("hqk,khd->qhd", torch.softmax(s, -1), v)


def dequantized(name, kc, vc, ks, vs, blocks, ctx, dev):
    """float64 K, V ``[ctx, heads, d]`` of a sequence's ``blocks`` as the pool holds them."""
    idx = torch.tensor(blocks, device=dev)
    if name == "int2":  # finished blocks dequantized, the open one from its residual slot
        fin = (torch.arange(len(blocks), device=dev) + 1) * BS <= ctx
        k, v = int2.read_blocks(kc, vc, ks, vs, idx, fin, torch.bfloat16)
        return k.flatten(0, 1)[:ctx].double(), v.flatten(0, 1)[:ctx].double()
    k = dequantize(kc[idx], ks[idx], torch.float64).flatten(0, 1)[:ctx]
    v = dequantize(vc[idx], vs[idx], torch.float64).flatten(0, 1)[:ctx]
    if name == "int4":
        k = k @ hadamard(k.shape[-1], torch.float64, dev)  # stored rotated
    return k, v


def correctness(dev, quick: bool) -> None:
    g = torch.Generator(device="cpu").manual_seed(0)
    hq, hkv, d = (8, 2, 64) if quick else (HQ, HKV, D)
    ctx_lens, q_lens = ([40, 17], [1, 5]) if quick else ([700, 33, 1500, 130], [1, 33, 1, 7])
    print("| KV | rel. error vs float64 over dequantized | vs float64 over originals |")
    print("|---|---:|---:|")
    for name in FORMATS[1:]:
        try:
            _correctness_row(name, dev, g, hq, hkv, d, ctx_lens, q_lens)
        except Exception as e:  # reported, the other formats still run
            print(f"| {name} | failed: {type(e).__name__}: {str(e)[:300]} | |")


def _correctness_row(name, dev, g, hq, hkv, d, ctx_lens, q_lens) -> None:
    """One format's row of :func:`correctness`."""
    from local_engine.attention import triton_backend

    n_blocks = [-(-c // BS) for c in ctx_lens]
    n_pool = sum(n_blocks) + 2
    raw, kc, vc, ks, vs = pool(name, n_pool, dev, hkv, d)
    per_slot = int2.Layout(BS, hkv, d).blocks_per_slot(2)  # bf16 residual slots
    opened = 0
    tables = torch.zeros((len(ctx_lens), max(n_blocks)), dtype=torch.int32)
    perm = torch.randperm(sum(n_blocks) + 2, generator=g).tolist()
    data, table_rows = [], []
    for i, (c, n) in enumerate(zip(ctx_lens, n_blocks)):
        blocks = [perm.pop() for _ in range(n)]
        tables[i, :n] = torch.tensor(blocks)
        slot = torch.tensor([blocks[p // BS] * BS + p % BS for p in range(c)])
        k = torch.randn((c, hkv, d), generator=g)
        k[..., 3] *= 15  # an outlier channel
        v = torch.randn((c, hkv, d), generator=g) * 0.5
        kb, vb = k.to(dev, torch.bfloat16), v.to(dev, torch.bfloat16)
        if name == "int2":  # the blocks the last 4 tokens sit in are written open
            for b in sorted({blocks[p // BS] for p in range(max(c - 4, 0), c)}):
                int2.set_residual_ids(raw, [b], [n_pool + opened * per_slot])
                opened += 1
        # two calls: a prompt, then its last 3 tokens as decode-like writes
        triton_backend.write_kv_cache(kb[:-3], vb[:-3], kc, vc, slot[:-3].to(dev), ks, vs)
        for j in range(c - 3, c):
            s = slot[j : j + 1].to(dev)
            triton_backend.write_kv_cache(kb[j : j + 1], vb[j : j + 1], kc, vc, s, ks, vs)
        data.append((kb.double(), vb.double()))
        table_rows.append(blocks)
    q = torch.randn((sum(q_lens), hq, d), generator=g).to(dev, torch.bfloat16)
    cu = torch.tensor([0] + list(torch.tensor(q_lens).cumsum(0)), dtype=torch.int32)
    lens = torch.tensor(ctx_lens, dtype=torch.int32)
    out = triton_backend.paged_attention(
        q, kc, vc, tables.to(dev), cu.to(dev), lens.to(dev), k_scale=ks, v_scale=vs
    )
    deq, orig = [], []
    for i, (c, ql) in enumerate(zip(ctx_lens, q_lens)):
        kd, vd = dequantized(name, kc, vc, ks, vs, table_rows[i], c, dev)
        qi = q[cu[i] : cu[i + 1]].double()
        deq.append(dense(qi, kd, vd, c, ql))
        orig.append(dense(qi, data[i][0], data[i][1], c, ql))
    deq, orig = torch.cat(deq), torch.cat(orig)
    e_deq = float((out.double() - deq).norm() / deq.norm())
    e_orig = float((out.double() - orig).norm() / orig.norm())
    print(f"| {name} | {e_deq:.2e} | {e_orig:.3f} |")


def copy_bandwidth(dev) -> float:
    """GB/s of a 4 GiB device-to-device copy (read + write bytes)."""
    n = 1 << 31
    a = torch.empty(n, dtype=torch.int16, device=dev)
    b = torch.empty_like(a)
    for _ in range(3):
        b.copy_(a)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(10):
        b.copy_(a)
    torch.cuda.synchronize()
    dt = (time.perf_counter() - t0) / 10
    del a, b
    return 2 * n * 2 / dt / 1e9


def time_call(fn, iters: int, dev) -> float:
    """ms per call: CUDA-graph replays on the GPU (:func:`kernels.bench`); one eager call
    after warm-up on the CPU interpreter (``iters`` unused there)."""
    if dev.type == "cuda":
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        import kernels

        return kernels.bench(fn)
    for _ in range(2):
        fn()
    t0 = time.perf_counter()
    fn()
    return (time.perf_counter() - t0) * 1e3


def filled_pool(name, batch, ctx, dev, hkv, d):
    """A pool of ``batch x ctx`` tokens written through the format's own write kernel."""
    from local_engine.attention import triton_backend

    n_blocks = batch * ctx // BS
    raw, kc, vc, ks, vs = pool(name, n_blocks, dev, hkv, d)
    chunk = 1 << 16
    gen = torch.Generator(device=dev).manual_seed(1)
    for s0 in range(0, batch * ctx, chunk):
        n = min(chunk, batch * ctx - s0)
        k = torch.randn((n, hkv, d), device=dev, generator=gen).to(torch.bfloat16)
        k[..., 3] *= 15
        v = torch.randn((n, hkv, d), device=dev, generator=gen).to(torch.bfloat16)
        slots = torch.arange(s0, s0 + n, device=dev)
        triton_backend.write_kv_cache(k, v, kc, vc, slots, k_scale=ks, v_scale=vs)
    return raw, kc, vc, ks, vs


def decode_speed(dev, iters: int, quick: bool) -> dict:
    from local_engine.attention import triton_backend
    from local_engine.attention.triton_backend import KernelConfig

    shapes = [(4, 64)] if quick else [(64, 4096), (16, 32768)]
    hq, hkv, d = (8, 2, 64) if quick else (HQ, HKV, D)
    bw = copy_bandwidth(dev) if dev.type == "cuda" else float("nan")
    print(f"\ncopy bandwidth (4 GiB device copy): {bw:.0f} GB/s")
    print(
        "| batch x context | KV | tiles | KV bytes read | ms per call | floor ms | floor / ms | vs bf16 |"
    )
    print("|---|---|---|---:|---:|---:|---:|---:|")
    summary: dict = {}
    sweep = [None] if quick else [None, (32, 1), (32, 2), (64, 2), (64, 4), (128, 4)]
    for batch, ctx in shapes:
        base = None
        for name in FORMATS:
            try:
                raw, kc, vc, ks, vs = filled_pool(name, batch, ctx, dev, hkv, d)
            except Exception as e:  # reported, the other formats still run
                print(
                    f"| {batch} x {ctx} | {name} | write failed: {type(e).__name__}: {str(e)[:300]} |"
                )
                continue
            n_blocks = batch * ctx // BS
            tables = torch.arange(n_blocks, dtype=torch.int32, device=dev).view(batch, -1)
            q = torch.randn((batch, hq, d), device=dev, dtype=torch.bfloat16)
            cu = torch.arange(batch + 1, dtype=torch.int32, device=dev)
            lens = torch.full((batch,), ctx, dtype=torch.int32, device=dev)
            kv_bytes = raw.numel() * raw.element_size()
            floor = kv_bytes / (bw * 1e9) * 1e3
            best = None
            entries = {"int4": [None, "old"], "int2": sweep}.get(name, [None])
            for cfg in entries:
                kw = dict(k_scale=ks, v_scale=vs, decode_kernel="triton")
                if cfg == "old":  # the kernel before 2026-12-03, its tile rule then
                    kw["config"] = KernelConfig(16, 32, 1, 3)
                    kw["int4_variant"] = (0, False)
                elif cfg is not None:
                    kw["config"] = KernelConfig(16, cfg[0], cfg[1], 3 if cfg[1] == 1 else 2)
                try:
                    call = functools.partial(
                        triton_backend.paged_attention, q, kc, vc, tables, cu, lens, **kw
                    )
                    ms = time_call(call, iters, dev)
                except Exception as e:  # a tile the compiler refuses: reported, skipped
                    print(f"| {batch} x {ctx} | {name} | {cfg} | failed: {type(e).__name__} |")
                    continue
                base = base or ms
                tiles = {None: "rule", "old": "32 keys, 1 warp"}.get(cfg) or (
                    f"{cfg[0]} keys, {cfg[1]} warps"
                )
                label = {"auto": "bf16", "int4": "int4 old" if cfg == "old" else "int4"}.get(
                    name, name
                )
                print(
                    f"| {batch} x {ctx} | {label} | {tiles} | {kv_bytes / 2**20:.0f} MiB | "
                    f"{ms:.4f} | {floor:.4f} | {floor / ms:.2f} | {base / ms:.2f}x |",
                    flush=True,
                )
                if cfg is None or cfg == "old":
                    summary[(batch, ctx, label if cfg else name)] = (ms, floor, base / ms)
                elif best is None or ms < best[0]:
                    best = (ms, tiles)
            if best is not None:
                summary[(batch, ctx, name + " best")] = (best[0], floor, base / best[0], best[1])
            del raw, kc, vc, ks, vs
            if dev.type == "cuda":
                torch.cuda.empty_cache()
    return summary


def residency(dev) -> dict:
    """Resident 4k-token requests per format on the Llama-3-8B shape (see the docstring)."""
    from local_engine.runner import kv_block_bytes

    mc = ModelConfig("llama-3-8b", 4096, 32, 32, 8, 128, 14336, 128256)
    free, total = torch.cuda.mem_get_info(dev)
    budget = int((free - WEIGHTS_8B) * 0.9)
    print(
        f"\nresidency: free {free / 1e9:.1f} GB of {total / 1e9:.1f}; minus 8B bf16 weights "
        f"{WEIGHTS_8B / 1e9:.2f} GB; x 0.9 -> KV budget {budget / 1e9:.1f} GB"
    )
    print("| KV | bytes / token | blocks | 4k requests resident | vs bf16 | allocated |")
    print("|---|---:|---:|---:|---:|---|")
    out, base = {}, None
    for name in FORMATS:
        fmt = kv_cache_format(name, torch.bfloat16, dev)
        per_block = kv_block_bytes(mc, BS, fmt)
        # int2: its residual slots (max_num_seqs 64 + 4, bf16) come out of the same budget
        residual = fmt.residual_blocks(mc, BS, 64)
        blocks = budget // per_block - residual
        reqs = blocks // (4096 // BS)
        base = base or reqs
        try:
            raw, views = allocate_kv_cache(mc, blocks, BS, fmt, dev, int2.residual_slots(64))
            ok = f"yes ({raw.numel() * raw.element_size() / 1e9:.1f} GB)"
            del raw, views  # (the views hold the pool too)
        except torch.cuda.OutOfMemoryError as e:
            ok = f"no: {str(e)[:60]}"
        torch.cuda.empty_cache()
        label = name if name != "auto" else "bf16"
        print(
            f"| {label} | {per_block // BS:,} | {blocks:,} | {reqs:,} | {reqs / base:.2f}x | {ok} |"
        )
        out[name] = reqs
    return out


def main() -> None:
    global FORMATS
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument(
        "--formats",
        default=",".join(FORMATS),
        help="KV formats to run (bf16 = auto, always run: the ratios' base), e.g. auto,int2",
    )
    args = ap.parse_args()
    FORMATS = tuple(["auto"] + [f for f in args.formats.split(",") if f in FORMATS[1:]])
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else "CPU (interpreter)"
    print(
        f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {name}, torch {torch.__version__}"
    )
    correctness(dev, args.quick)
    speed = decode_speed(dev, args.iters, args.quick)
    res = residency(dev) if dev.type == "cuda" else {}
    print("\n## summary (Triton decode, 32/8 heads d128, block 16; ratio = bf16 ms / ms)")
    print(
        "| KV | 64 x 4096 ms | vs bf16 | floor/ms | 16 x 32768 ms | vs bf16 | floor/ms | 4k requests on 8B |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    shapes = sorted({(b, c) for b, c, _ in speed}, key=lambda bc: bc[1])  # the header's order
    extra = (["int4 old"] if "int4" in FORMATS else []) + (
        ["int2 best"] if "int2" in FORMATS else []
    )
    for fmt in [*FORMATS, *extra]:
        cells = []
        for b, c in shapes:
            r = speed.get((b, c, fmt))
            cells += [f"{r[0]:.4f}", f"{r[2]:.2f}x", f"{r[1] / r[0]:.2f}"] if r else ["", "", ""]
        label = "bf16" if fmt == "auto" else fmt
        print(f"| {label} | " + " | ".join(cells) + f" | {res.get(fmt, '')} |")


if __name__ == "__main__":
    main()
