"""INT4 KV cache on the GPU: Triton correctness and decode speed against bf16 and INT8.

1. Correctness: the Triton KV write and paged attention over an INT4 pool (bf16 queries, a
   mixed decode/prefill batch, 32/8 heads, d128) against float64 attention over the dequantized
   cache (keys rotated back), and over the original values; INT8 on the same data.
2. Decode speed, one layer, 32 query / 8 KV heads, head_dim 128, block 16, the Triton kernel for
   every format (``decode_kernel="triton"``: the CUDA decode kernel reads no packed INT4, so
   the comparison is kernel against kernel), at 64 x 4,096 and 16 x 32,768 tokens: CUDA-event
   time of one call (mean of ``--iters`` after warm-up; the INT4 queries' Hadamard rotation
   included). The floor: the KV bytes the step must read over this GPU's copy bandwidth,
   measured in the same run (a 4 GiB device-to-device copy: read + write bytes / time).

Usage: ``PYTHONPATH=. python bench/kv_int4_gpu.py [--iters 50] [--quick]`` (``--quick``: tiny
shapes, for a CPU run under ``TRITON_INTERPRET=1``). Prints tables; asserts nothing.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from local_engine.config import ModelConfig  # noqa: E402
from local_engine.kv_cache.quant import allocate_kv_cache, dequantize, kv_cache_format  # noqa: E402

HQ, HKV, D, BS = 32, 8, 128, 16


def pool(fmt_name: str, num_blocks: int, dev, heads=HKV, d=D):
    mc = ModelConfig("bench", heads * d, 1, heads, heads, d, 8, 8)
    fmt = kv_cache_format(fmt_name, torch.bfloat16, dev)
    raw, layers = allocate_kv_cache(mc, num_blocks, BS, fmt, dev)
    layer = layers[0]
    return (
        raw,
        layer[0],
        layer[1],
        (layer[2] if len(layer) == 4 else None),
        (layer[3] if len(layer) == 4 else None),
    )


def dense(q, k, v, ctx, q_len):
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    s = torch.einsum("qhd,khd->hqk", q, k) * q.shape[-1] ** -0.5
    pos = torch.arange(ctx - q_len, ctx, device=q.device)[:, None]
    s = s.masked_fill(torch.arange(ctx, device=q.device)[None, :] > pos, float("-inf"))
    return torch.einsum("hqk,khd->qhd", torch.softmax(s, -1), v)


def correctness(dev, quick: bool) -> None:
    from local_engine.attention import triton_backend
    from local_engine.attention.triton_kv_write import write_kv_cache
    from local_engine.kv_cache.quant import hadamard

    g = torch.Generator(device="cpu").manual_seed(0)
    hq, hkv, d = (8, 2, 64) if quick else (HQ, HKV, D)
    ctx_lens, q_lens = ([40, 17], [1, 5]) if quick else ([700, 33, 1500, 130], [1, 33, 1, 7])
    print("| KV | rel. error vs float64 over dequantized | vs float64 over originals |")
    print("|---|---:|---:|")
    for name in ("int8", "int4"):
        n_blocks = [-(-c // BS) for c in ctx_lens]
        raw, kc, vc, ks, vs = pool(name, sum(n_blocks) + 2, dev, hkv, d)
        tables = torch.zeros((len(ctx_lens), max(n_blocks)), dtype=torch.int32)
        perm = torch.randperm(sum(n_blocks) + 2, generator=g).tolist()
        data, slots = [], []
        for i, (c, n) in enumerate(zip(ctx_lens, n_blocks)):
            blocks = [perm.pop() for _ in range(n)]
            tables[i, :n] = torch.tensor(blocks)
            slot = torch.tensor([blocks[p // BS] * BS + p % BS for p in range(c)])
            k = torch.randn((c, hkv, d), generator=g)
            k[..., 3] *= 15  # an outlier channel
            v = torch.randn((c, hkv, d), generator=g) * 0.5
            write_kv_cache(
                k.to(dev, torch.bfloat16),
                v.to(dev, torch.bfloat16),
                kc,
                vc,
                slot.to(dev),
                ks,
                vs,
            )
            data.append((k.to(torch.bfloat16).double(), v.to(torch.bfloat16).double()))
            slots.append(slot)
        q = torch.randn((sum(q_lens), hq, d), generator=g).to(dev, torch.bfloat16)
        cu = torch.tensor([0] + list(torch.tensor(q_lens).cumsum(0)), dtype=torch.int32)
        lens = torch.tensor(ctx_lens, dtype=torch.int32)
        out = triton_backend.paged_attention(
            q, kc, vc, tables.to(dev), cu.to(dev), lens.to(dev), k_scale=ks, v_scale=vs
        )
        h = hadamard(d, torch.float64, dev)
        deq, orig = [], []
        for i, (c, ql) in enumerate(zip(ctx_lens, q_lens)):
            b, o = (slots[i] // BS).to(dev), (slots[i] % BS).to(dev)
            kd = dequantize(kc[b, o], ks[b, o], torch.float64)
            if name == "int4":
                kd = kd @ h
            vd = dequantize(vc[b, o], vs[b, o], torch.float64)
            qi = q[cu[i] : cu[i + 1]].double()
            deq.append(dense(qi, kd, vd, c, ql))
            orig.append(dense(qi, data[i][0].to(dev), data[i][1].to(dev), c, ql))
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


def decode_speed(dev, iters: int, quick: bool) -> None:
    from local_engine.attention import triton_backend

    shapes = [(4, 64)] if quick else [(64, 4096), (16, 32768)]
    hq, hkv, d = (8, 2, 64) if quick else (HQ, HKV, D)
    bw = copy_bandwidth(dev) if dev.type == "cuda" else float("nan")
    print(f"\ncopy bandwidth (4 GiB device copy): {bw:.0f} GB/s")
    print("| batch x context | KV | KV bytes read | ms per call | floor ms | vs bf16 |")
    print("|---|---|---:|---:|---:|---:|")
    for batch, ctx in shapes:
        n_blocks = batch * ctx // BS
        base = None
        for name in ("auto", "int8", "int4"):
            raw, kc, vc, ks, vs = pool(name, n_blocks, dev, hkv, d)
            raw.random_(0, 255) if name != "auto" else raw.normal_()
            if ks is not None:
                ks.fill_(0.01)
                vs.fill_(0.01)
            tables = torch.arange(n_blocks, dtype=torch.int32, device=dev).view(batch, -1)
            q = torch.randn((batch, hq, d), device=dev, dtype=torch.bfloat16)
            cu = torch.arange(batch + 1, dtype=torch.int32, device=dev)
            lens = torch.full((batch,), ctx, dtype=torch.int32, device=dev)
            kw = dict(k_scale=ks, v_scale=vs, decode_kernel="triton")
            for _ in range(5):
                triton_backend.paged_attention(q, kc, vc, tables, cu, lens, **kw)
            if dev.type == "cuda":
                torch.cuda.synchronize()
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(True)
                start.record()
                for _ in range(iters):
                    triton_backend.paged_attention(q, kc, vc, tables, cu, lens, **kw)
                end.record()
                torch.cuda.synchronize()
                ms = start.elapsed_time(end) / iters
            else:
                t0 = time.perf_counter()
                triton_backend.paged_attention(q, kc, vc, tables, cu, lens, **kw)
                ms = (time.perf_counter() - t0) * 1e3
            kv_bytes = raw.numel() * raw.element_size()
            floor = kv_bytes / (bw * 1e9) * 1e3
            base = base or ms
            print(
                f"| {batch} x {ctx} | {name if name != 'auto' else 'bf16'} | {kv_bytes / 2**20:.0f} MiB "
                f"| {ms:.4f} | {floor:.4f} | {base / ms:.2f}x |"
            )
            del raw, kc, vc, ks, vs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else "CPU (interpreter)"
    print(
        f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {name}, torch {torch.__version__}"
    )
    correctness(dev, args.quick)
    decode_speed(dev, args.iters, args.quick)


if __name__ == "__main__":
    main()
