"""The fused rotary + KV write into a quantized cache (FP8 E4M3 / INT8), Triton under the
interpreter against the torch reference and against an independent rotary (complex numbers)
quantized by the formula of :mod:`local_engine.kv_cache.quant`."""

from __future__ import annotations

import os

os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported anywhere in this process

import importlib

import pytest
import torch

from local_engine import ops
from local_engine.config import ModelConfig
from local_engine.kv_cache.quant import QMAX, allocate_kv_cache, dequantize, kv_cache_format

from .test_triton_ops import complex_rotary


@pytest.fixture(scope="module")
def interpreted():
    from local_engine.attention import triton_attention, triton_kv_write
    from local_engine.ops import triton_ops

    for mod in (triton_kv_write, triton_attention, triton_ops):
        importlib.reload(mod)
    importlib.reload(importlib.import_module("local_engine.attention.triton_backend"))
    assert type(triton_ops._rotary_kv_kernel).__name__ == "InterpretedFunction"


def pool(fmt, num_blocks, block_size, kv_heads, head_dim):
    mc = ModelConfig("t", kv_heads * head_dim, 1, kv_heads, kv_heads, head_dim, 8, 8)
    return allocate_kv_cache(
        mc, num_blocks, block_size, kv_cache_format(fmt, torch.float32), "cpu"
    )[1][0]


@pytest.mark.parametrize("fmt", ["int8", "fp8"])
@pytest.mark.parametrize("heads,kv_heads,head_dim", [(6, 2, 32), (9, 3, 64)])
def test_rotary_and_quantized_write(interpreted, fmt, heads, kv_heads, head_dim):
    g = torch.Generator().manual_seed(11)
    T, theta, nb, bs = 7, 10000.0, 5, 4
    from local_engine.models.llama import RotaryEmbedding

    rope = RotaryEmbedding(head_dim, 300, theta, None)
    q = torch.randn(T, heads, head_dim, generator=g)
    k = torch.randn(T, kv_heads, head_dim, generator=g) * 3
    k[2, 0, 5] = 80.0  # an outlier channel
    v = torch.randn(T, kv_heads, head_dim, generator=g) * 0.2
    positions = torch.randint(0, 300, (T,), generator=g)
    slots = torch.randperm(nb * bs, generator=g)[:T]
    slots[3] = -1
    kc, vc, ks, vs = pool(fmt, nb, bs, kv_heads, head_dim)
    kr, vr, ksr, vsr = pool(fmt, nb, bs, kv_heads, head_dim)
    out = ops.rotary_and_write_kv(
        q.clone(), k, v, positions, rope.cos, rope.sin, kc, vc, slots, "triton", ks, vs
    )
    ops.rotary_and_write_kv(
        q.clone(), k, v, positions, rope.cos, rope.sin, kr, vr, slots, "torch", ksr, vsr
    )
    torch.testing.assert_close(
        out.double(), complex_rotary(q, positions, theta).double(), rtol=1e-4, atol=1e-4
    )
    k_want = complex_rotary(k, positions, theta)
    qmax = QMAX[kc.dtype]
    for t in range(T):
        if slots[t] < 0:
            continue
        b, o = divmod(int(slots[t]), bs)
        for want, cache, sc, ref_c, ref_s in ((k_want, kc, ks, kr, ksr), (v, vc, vs, vr, vsr)):
            x = want[t].double()
            torch.testing.assert_close(
                sc[b, o].double(), x.abs().amax(-1) / qmax, rtol=1e-4, atol=0
            )
            s = sc[b, o].double().unsqueeze(-1)
            err = (dequantize(cache[b, o], sc[b, o], torch.float64) - x).abs()
            lim = s / 2 if fmt == "int8" else 2.0**-4 * x.abs() + 2.0**-6 * s
            assert (err <= lim * 1.001 + 1e-3 * s).all()  # + the fp32 vs fp64 rotary gap
            # torch reference: same scales; values the same up to a rounding tie (one level)
            torch.testing.assert_close(sc[b, o], ref_s[b, o], rtol=1e-6, atol=0)
            a = dequantize(cache[b, o], sc[b, o], torch.float64)
            r = dequantize(ref_c[b, o], ref_s[b, o], torch.float64)
            step = s if fmt == "int8" else 2.0**-3 * x.abs() + 2.0**-9 * s
            assert ((a - r).abs() <= step * 1.001 + 1e-9).all()
    live = torch.zeros(nb * bs, dtype=torch.bool)
    live[slots[slots >= 0]] = True
    assert (ks.reshape(-1, kv_heads)[~live] == 0).all(), "only the mapped slots get scales"
