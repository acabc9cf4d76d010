"""The group decode kernel for 1-byte caches (``paged_decode_group_kernel``; issue 12, session
3b), run by the Triton interpreter on the CPU: both modes (``"group"``: CUDA-core float32 dot
products over the group's next_pow2(G) rows; ``"group_dot"``: ``K @ Q^T`` with the group on the
MMA's N side) against float64 attention over the *dequantized* cache, for GQA groups 1, 4 and 7,
odd context lengths (a last block partly filled), split-K and not, INT8 (both conversions) and
FP8; and the INT8 bit-trick conversion against every INT8 value.

Tolerances: float32 queries, mode 0 computes everything in float32 (products of exact 1-byte
values with float32 queries): 1e-5 relative over the output (only float32 rounding differs from
float64; measured ~1e-7). bf16 queries: mode 0 keeps the queries exact (bf16 -> float32) and
rounds only the output to bf16 (2**-9 relative per element): 5e-3; mode 1 also rounds the
probabilities to bf16 for the MMA (as the 16-row kernel's bf16 products do): 2e-2.
"""

from __future__ import annotations

import os

os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported anywhere in this process

import importlib

import pytest
import torch
import triton
import triton.language as tl

from local_engine.attention import write_kv_cache
from local_engine.attention.triton_attention import _int8_to_f32
from local_engine.config import ModelConfig
from local_engine.kv_cache.quant import allocate_kv_cache, dequantize, kv_cache_format


@pytest.fixture(scope="module")
def tb():
    """The Triton backend, interpreted (reloaded if triton was imported without the flag)."""
    from local_engine.attention import triton_attention, triton_kv_write

    if type(triton_attention.paged_attention_kernel).__name__ != "InterpretedFunction":
        importlib.reload(triton_kv_write)
        importlib.reload(triton_attention)
    return importlib.reload(importlib.import_module("local_engine.attention.triton_backend"))


def _pool(fmt, num_blocks, bs, kv_heads, head_dim):
    mc = ModelConfig(
        name="t",
        hidden_size=kv_heads * head_dim,
        num_layers=1,
        num_heads=kv_heads,
        num_kv_heads=kv_heads,
        head_dim=head_dim,
        intermediate_size=8,
        vocab_size=8,
    )
    raw, layers = allocate_kv_cache(mc, num_blocks, bs, kv_cache_format(fmt, torch.float32), "cpu")
    return layers[0]


def _case(fmt, group, ctx_lens, q_dtype, seed, H=2, D=32, bs=16):
    """Decode queries (one token per sequence) over a pool written by the torch quantizer in
    shuffled blocks; returns (args, kwargs, float64 attention over the dequantized cache)."""
    g = torch.Generator().manual_seed(seed)
    Hq = H * group
    n_blocks = [-(-c // bs) for c in ctx_lens]
    total = sum(n_blocks) + 1
    kc, vc, ks, vs = _pool(fmt, total, bs, H, D)
    perm = torch.randperm(total, generator=g).tolist()
    tables = torch.zeros((len(ctx_lens), max(n_blocks)), dtype=torch.int32)
    refs = []
    q = (torch.randn((len(ctx_lens), Hq, D), generator=g) * 1.5).to(q_dtype)
    for i, (c, n) in enumerate(zip(ctx_lens, n_blocks)):
        blocks = [perm.pop() for _ in range(n)]
        tables[i, :n] = torch.tensor(blocks)
        slot = torch.tensor([blocks[p // bs] * bs + p % bs for p in range(c)])
        k = torch.randn((c, H, D), generator=g) * 2
        v = torch.randn((c, H, D), generator=g)
        k[c // 3] *= 40  # an outlier token (its own scale)
        write_kv_cache(k, v, kc, vc, slot, backend="torch", k_scale=ks, v_scale=vs)
        b, o = slot // bs, slot % bs
        kd = dequantize(kc[b, o], ks[b, o], torch.float64)  # [c, H, D]
        vd = dequantize(vc[b, o], vs[b, o], torch.float64)
        qi = q[i].double().view(H, group, D)
        s = torch.einsum("hgd,chd->hgc", qi, kd) * D**-0.5
        refs.append(torch.einsum("hgc,chd->hgd", torch.softmax(s, -1), vd).reshape(Hq, D))
    cu = torch.arange(len(ctx_lens) + 1, dtype=torch.int32)
    lens = torch.tensor(ctx_lens, dtype=torch.int32)
    return (q, kc, vc, tables, cu, lens), dict(k_scale=ks, v_scale=vs), torch.stack(refs)


def rel(a, b):
    return float((a.double() - b).norm() / b.norm())


CTX = [37, 1, 95, 16, 129]  # odd lengths, one token, one exact block, 8 blocks + 1


@pytest.mark.parametrize("group", [1, 4, 7])
@pytest.mark.parametrize("fmt,magic", [("int8", True), ("int8", False), ("fp8", True)])
def test_group_kernel_matches_float64_over_dequantized_cache(group, fmt, magic, tb):
    args, kw, ref = _case(fmt, group, CTX, torch.float32, seed=group * 3 + len(fmt))
    for kernel, tol in (("group", 1e-5), ("group_split", 1e-5), ("group_dot", 1e-5)):
        for nseg in (None, 1, 3):
            out = tb.paged_attention(
                *args, decode_kernel=kernel, cvt_magic=magic, num_segments=nseg, **kw
            )
            assert not out.isnan().any()
            assert rel(out, ref) < tol, (kernel, nseg, rel(out, ref))


@pytest.mark.parametrize("fmt", ["int8", "fp8"])
def test_group_kernel_bf16_queries(fmt, tb):
    args, kw, ref = _case(fmt, 4, CTX, torch.bfloat16, seed=17)
    for kernel, tol in (("group", 5e-3), ("group_split", 5e-3), ("group_dot", 2e-2)):
        out = tb.paged_attention(*args, decode_kernel=kernel, num_segments=2, **kw)
        assert out.dtype == torch.bfloat16
        assert rel(out, ref) < tol, (kernel, rel(out, ref))
    # the mode-0 output is float32 math rounded once: far inside the bf16 bound
    out = tb.paged_attention(*args, decode_kernel="group", **kw)
    assert rel(out, ref) < 5e-3


def test_group_kernel_head_dim_not_a_power_of_two(tb):
    """head_dim 48 (padded to 64 in registers, masked in loads and stores), group 7."""
    args, kw, ref = _case("int8", 7, [23, 50], torch.float32, seed=5, H=1, D=48)
    for kernel in ("group", "group_split", "group_dot"):
        out = tb.paged_attention(*args, decode_kernel=kernel, **kw)
        assert rel(out, ref) < 1e-5, (kernel, rel(out, ref))


def test_group_kernel_finds_sequences_without_one_token_each(tb):
    """A decode-shaped call (tokens == sequences) whose cu_seqlens_q is not 0, 1, 2, ...: the
    kernel's fallback search must give each token its own sequence and causal position."""
    args, kw, _ = _case("int8", 4, [40, 33, 70], torch.float32, seed=9)
    q, kc, vc, tables, cu, lens = args
    cu2 = torch.tensor([0, 0, 2, 3], dtype=torch.int32)  # seq 0: none, seq 1: two, seq 2: one
    ref = tb.paged_attention(q, kc, vc, tables, cu2, lens, decode_kernel="mma", **kw)
    for kernel in ("group", "group_split", "group_dot"):
        out = tb.paged_attention(q, kc, vc, tables, cu2, lens, decode_kernel=kernel, **kw)
        assert rel(out, ref.double()) < 1e-5, kernel


def test_unknown_decode_kernel(tb):
    args, kw, _ = _case("int8", 1, [5], torch.float32, seed=1)
    with pytest.raises(ValueError, match="decode_kernel must be one of"):
        tb.paged_attention(*args, decode_kernel="cuda", **kw)


@triton.jit
def _cvt_kernel(x_ptr, y_ptr, MAGIC: tl.constexpr):
    i = tl.arange(0, 256)
    tl.store(y_ptr + i, _int8_to_f32(tl.load(x_ptr + i), MAGIC))


def test_int8_magic_conversion_is_exact_for_every_value(tb):
    """bitcast((x ^ 0x80) | 0x4B000000) - 8388736.0 == x for all 256 INT8 values."""
    x = torch.arange(-128, 128, dtype=torch.int8)
    for magic in (True, False):
        y = torch.empty(256, dtype=torch.float32)
        _cvt_kernel[(1,)](x, y, MAGIC=magic)
        assert torch.equal(y, x.float()), magic
