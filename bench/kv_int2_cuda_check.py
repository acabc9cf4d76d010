"""int2's compiled Triton kernels on a GPU against the torch reference, on the same device.

Sequences of several lengths (32/8 heads, d128, block 16, bf16 and float32) are written as a
prompt, then decode tokens one at a time, then a chunk that fills an open block, through the
Triton write + finalize kernels in one pool and through :func:`local_engine.kv_cache.int2.write`
in another (residual slots handed out alike). Checked: the residual slots equal bit for bit
(the model dtype, stored as is); the 2-bit codes agree (at most one level apart, on under
1% of them: float rounding ties) and the float16 scales and minima to float16 rounding; paged
attention (Triton kernel, a mixed batch) against the torch reference over the same pool.

Usage: ``PYTHONPATH=. python bench/kv_int2_cuda_check.py``. Prints a table; exit status 1 if a
check fails (``--device cpu`` runs it under ``TRITON_INTERPRET=1``, small shapes).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

BS = 16


def run(dev: str, dtype, hq: int, hkv: int, d: int, ctx_lens: list[int]) -> list[str]:
    """One dtype's checks; returns the failures (empty when all hold)."""
    import torch

    from local_engine.attention import torch_ref, triton_backend
    from local_engine.kv_cache import int2

    g = torch.Generator(device="cpu").manual_seed(0)
    n_blocks = [-(-c // BS) for c in ctx_lens]
    nb = sum(n_blocks) + 2
    cuts = [max(c // 2, 1) for c in ctx_lens]
    # every block from the prompt's last one to the end is opened (one slot each, never reused
    # here): a long sequence needs many, so the slots are counted, not guessed
    slots = sum((c - 1) // BS - (cut - 1) // BS + 1 for c, cut in zip(ctx_lens, cuts))
    pools = [int2.allocate(1, nb, BS, hkv, d, dev, slots, dtype) for _ in range(2)]
    per = int2.Layout(BS, hkv, d).blocks_per_slot(torch.empty((), dtype=dtype).element_size())
    perm = torch.randperm(nb, generator=g).tolist()
    tables = torch.zeros((len(ctx_lens), max(n_blocks)), dtype=torch.int32)
    opened = 0
    for i, (c, n) in enumerate(zip(ctx_lens, n_blocks)):
        blocks = [perm.pop() for _ in range(n)]
        tables[i, :n] = torch.tensor(blocks)
        slot = torch.tensor([blocks[p // BS] * BS + p % BS for p in range(c)], device=dev)
        k = (torch.randn((c, hkv, d), generator=g) + 2 * torch.randn(d, generator=g)).to(dev)
        k[..., 3] *= 15  # an outlier channel
        v = (torch.randn((c, hkv, d), generator=g) * 0.5).to(dev)
        k, v = k.to(dtype), v.to(dtype)
        cut = cuts[i]
        dec = min(c, cut + 5)
        pieces = [(0, cut)] + [(j, j + 1) for j in range(cut, dec)] + [(dec, c)]
        for b in sorted({blocks[p // BS] for p in range(cut - 1, c)}):
            for raw, _ in pools:  # the blocks written in more than one call are opened
                int2.set_residual_ids(raw, [b], [nb + opened * per])
            opened += 1
        for lo, hi in pieces:
            if hi <= lo:
                continue
            for (_, (views,)), mod in zip(pools, (triton_backend, torch_ref)):
                kc, vc, ks, vs = views
                mod.write_kv_cache(k[lo:hi], v[lo:hi], kc, vc, slot[lo:hi], k_scale=ks, v_scale=vs)
    (raw_t, (vt,)), (raw_r, (vr,)) = pools
    fails = []
    first = nb * raw_t.shape[-1]
    if not torch.equal(raw_t[0, 0].flatten()[first:], raw_r[0, 0].flatten()[first:]):
        fails.append("residual slots differ")
    # the pool's blocks (the pseudo-blocks past them hold the residual slots)
    ct = int2.unpack_int2(torch.cat((vt[0][:nb], vt[1][:nb])))
    cr = int2.unpack_int2(torch.cat((vr[0][:nb], vr[1][:nb])))
    off = (ct.int() - cr.int()).abs()
    if off.max() > 1 or (off > 0).float().mean() > 0.01:
        fails.append(f"codes differ: max {int(off.max())}, {float((off > 0).float().mean()):.4f}")
    for a, b, what in ((vt[2], vr[2], "K scales"), (vt[3], vr[3], "V scales")):
        if not torch.allclose(a[:nb].float(), b[:nb].float(), rtol=2e-3, atol=1e-4):
            fails.append(
                f"{what} differ: {float((a[:nb].float() - b[:nb].float()).abs().max()):.3g}"
            )
    q_lens = [1, min(7, ctx_lens[1]), 1, ctx_lens[3]] if len(ctx_lens) == 4 else [1] * len(ctx_lens)
    q = torch.randn((sum(q_lens), hq, d), generator=g).to(dev, dtype)
    cu = torch.tensor([0] + list(torch.tensor(q_lens).cumsum(0)), dtype=torch.int32, device=dev)
    lens = torch.tensor(ctx_lens, dtype=torch.int32, device=dev)
    tb = tables.to(dev)
    kc, vc, ks, vs = vt
    out = triton_backend.paged_attention(q, kc, vc, tb, cu, lens, k_scale=ks, v_scale=vs)
    ref = torch_ref.paged_attention(q, kc, vc, tb, cu, lens, k_scale=ks, v_scale=vs)
    err = float((out.double() - ref.double()).norm() / ref.double().norm())
    lim = 1e-5 if dtype == torch.float32 else 2e-2
    print(f"| {str(dtype).replace('torch.', '')} | {ctx_lens} | {err:.2e} | {lim:g} |")
    if not err < lim:
        fails.append(f"attention differs from the torch reference: {err:.2e}")
    return fails


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cuda")
    args = ap.parse_args()
    if args.device == "cpu":
        os.environ["TRITON_INTERPRET"] = "1"
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        print("kv_int2_cuda_check: no CUDA device", file=sys.stderr)
        return 2
    if args.device == "cpu":
        shape, ctx = (8, 2, 32), [37, 23, 32, 1]
    else:
        shape, ctx = (32, 8, 128), [700, 33, 1500, 130]
    print("| dtype | contexts | Triton vs torch attention (rel.) | limit |")
    print("|---|---|---:|---:|")
    fails = []
    for dtype in (torch.bfloat16, torch.float32):
        fails += run(args.device, dtype, *shape, ctx)
    print("int2 CUDA check: " + ("OK" if not fails else "FAILED: " + "; ".join(fails)))
    return 1 if fails else 0


if __name__ == "__main__":
    raise SystemExit(main())
