"""Quantized KV cache (FP8 E4M3, INT8): round trips, the KV write through the slot mapping, and
paged attention reading the quantized blocks, for the torch reference and the Triton kernels
(run by the Triton interpreter on the CPU, small shapes).

Bounds (per element, ``s`` the token-head's scale = amax / QMAX; derived in
:mod:`local_engine.kv_cache.quant`): INT8 ``|x - x'| <= s / 2``; FP8 ``|x - x'| <= 2**-4 |x| +
2**-10 s`` (2**-6 s under the interpreter, which flushes E4M3 subnormals). Attention over a
quantized cache is compared with float64 attention over the *dequantized* cache (tight: only
float32 arithmetic differs, 1e-5 relative in fp32; measured <= 1.5e-7) and with float64
attention over the *original* values (looser, stated per format: INT8 3e-2, FP8 1e-1 relative
over the whole output; measured 0.9-1.7% and 1.6-5.7% on these outlier-heavy inputs, seeds
3, 4, 7, both backends).
"""

from __future__ import annotations

import os

os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported anywhere in this process

import importlib

import pytest
import torch

from local_engine.attention import paged_attention, torch_ref, write_kv_cache
from local_engine.config import ModelConfig
from local_engine.kv_cache.quant import (
    QMAX,
    allocate_kv_cache,
    dequantize,
    kv_cache_format,
    quantize,
)

FORMATS = ["int8", "fp8"]
LOOSE = {"int8": 3e-2, "fp8": 1e-1}


@pytest.fixture(scope="module")
def tb():
    """The Triton backend, interpreted (reloaded if triton was imported without the flag)."""
    from local_engine.attention import triton_attention, triton_int4, triton_kv_write

    if type(triton_attention.paged_attention_kernel).__name__ != "InterpretedFunction":
        importlib.reload(triton_kv_write)
        importlib.reload(triton_int4)
        importlib.reload(triton_attention)
    return importlib.reload(importlib.import_module("local_engine.attention.triton_backend"))


def with_outliers(shape, g, scale=1.0):
    """Gaussian data with ~1% of elements x30 and a few whole rows x100 (an attention-sink-like
    token), so per-row scales and clamping are exercised."""
    x = torch.randn(shape, generator=g) * scale
    spikes = torch.rand(shape, generator=g) < 0.01
    x = torch.where(spikes, x * 30, x)
    rows = torch.rand(shape[:-1], generator=g) < 0.05
    return torch.where(rows.unsqueeze(-1), x * 100, x)


def bound(fmt: str, x: torch.Tensor, scale: torch.Tensor, interpreted: bool = False):
    s = scale.unsqueeze(-1).double()
    if fmt == "int8":
        return s / 2 * (1 + 1e-6)
    return 2.0**-4 * x.double().abs() + (2.0**-6 if interpreted else 2.0**-10) * s + 1e-30


def dtype_of(fmt):
    return kv_cache_format(fmt, torch.float32).dtype


@pytest.mark.parametrize("fmt", FORMATS)
def test_round_trip_within_the_format_bound(fmt):
    g = torch.Generator().manual_seed(1)
    x = with_outliers((64, 4, 128), g)
    x[3, 1] = 0.0  # an all-zero token-head: scale 0, values 0
    x[5, 2] = 1e-3 * torch.randn(128, generator=g)  # tiny values (FP8 subnormals)
    q, s = quantize(x, dtype_of(fmt))
    assert q.dtype == dtype_of(fmt) and s.dtype == torch.float32 and s.shape == (64, 4)
    # the scale is amax / QMAX, computed independently here
    torch.testing.assert_close(s, x.abs().amax(-1) / QMAX[dtype_of(fmt)], rtol=0, atol=0)
    assert s[3, 1] == 0 and (q[3, 1].float() == 0).all()
    xr = dequantize(q, s, torch.float64)
    err = (xr - x.double()).abs()
    assert (err <= bound(fmt, x, s)).all(), float((err - bound(fmt, x, s)).max())
    # each non-zero row's largest element maps to +-QMAX exactly
    idx = x.abs().argmax(-1, keepdim=True)
    peak = q.float().gather(-1, idx).squeeze(-1).abs()
    assert (peak[s > 0] == QMAX[dtype_of(fmt)]).all()
    # the bound is not vacuous: an INT8 round trip is not exact on Gaussian data
    assert err.max() > 0


def test_int8_rounds_half_up_and_clamps():
    x = torch.tensor([[127.0, 0.5, -0.5, 1.49, -126.6, 2.5]])  # scale = 127 / 127 = 1
    q, s = quantize(x, torch.int8)
    assert float(s) == 1.0
    assert q.tolist() == [[127, 1, 0, 1, -127, 3]]  # floor(y + 0.5)


def test_fp8_matches_torch_e4m3_cast():
    # scale = 448 / 448 = 1: values go through the plain E4M3 cast (round to nearest even)
    x = torch.tensor([[448.0, 17.0, 0.3, -3.3, 1e-3]])
    q, s = quantize(x, torch.float8_e4m3fn)
    assert float(s) == 1.0
    # by hand: 17 is a tie between 16 and 18 -> 16 (even); 0.3 -> 0.3125 (5/16);
    # 3.3 -> 3.25; 1e-3 -> the subnormal 2**-9 = 0.001953125 (nearest of 0, 2**-9)
    assert q.float().tolist() == [[448.0, 16.0, 0.3125, -3.25, 0.001953125]]


def _pool(fmt, num_blocks, block_size, kv_heads, head_dim, model_dtype=torch.float32):
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
    f = kv_cache_format(fmt, model_dtype)
    raw, layers = allocate_kv_cache(mc, num_blocks, block_size, f, "cpu")
    return raw, layers[0]


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_write_through_slot_mapping(fmt, backend, tb):
    g = torch.Generator().manual_seed(2)
    T, H, D, bs, nb = 11, 2, 32, 4, 6
    raw, (kc, vc, ks, vs) = _pool(fmt, nb, bs, H, D)
    k = with_outliers((T, H, D), g)
    v = with_outliers((T, H, D), g, 0.1)
    slots = torch.randperm(nb * bs, generator=g)[:T]
    slots[4] = -1  # padding: skipped
    write_kv_cache(k, v, kc, vc, slots, backend=backend, k_scale=ks, v_scale=vs)
    ref_qk, ref_sk = quantize(k, kc.dtype)
    written = torch.zeros(nb * bs, dtype=torch.bool)
    for t in range(T):
        sl = int(slots[t])
        if sl < 0:
            continue
        written[sl] = True
        b, o = divmod(sl, bs)
        for x, cache, sc in ((k, kc, ks), (v, vc, vs)):
            torch.testing.assert_close(sc[b, o], x[t].abs().amax(-1) / QMAX[kc.dtype])
            err = (dequantize(cache[b, o], sc[b, o], torch.float64) - x[t].double()).abs()
            assert (err <= bound(fmt, x[t], sc[b, o], backend == "triton")).all()
        if fmt == "int8":  # same float32 arithmetic in both backends: identical bytes
            assert torch.equal(kc[b, o], ref_qk[t]) and torch.equal(ks[b, o], ref_sk[t])
    # nothing else in the pool was touched (values and scales of unwritten slots stay 0)
    flat_k = kc.reshape(nb * bs, H, D).float()
    assert (flat_k[~written] == 0).all() and (ks.reshape(-1, H)[~written] == 0).all()


def _attention_case(fmt, backend, q_dtype, seed, tb):
    """A mixed batch (decode, prefill over a cached prefix, whole prompt) over a quantized
    pool in random blocks. Returns (out, float64 over dequantized, float64 over originals)."""
    g = torch.Generator().manual_seed(seed)
    Hq, H, D, bs = 6, 2, 32, 8
    ctx_lens, q_lens = [37, 23, 16, 1], [1, 7, 16, 1]
    n_blocks = [-(-c // bs) for c in ctx_lens]
    nb = sum(n_blocks) + 3
    raw, (kc, vc, ks, vs) = _pool(fmt, nb, bs, H, D)
    perm = torch.randperm(nb, generator=g).tolist()
    tables = torch.zeros((len(ctx_lens), max(n_blocks)), dtype=torch.int32)
    ks_orig, vs_orig, slots_all = [], [], []
    for i, (c, n) in enumerate(zip(ctx_lens, n_blocks)):
        blocks = [perm.pop() for _ in range(n)]
        tables[i, :n] = torch.tensor(blocks)
        slot = torch.tensor([blocks[p // bs] * bs + p % bs for p in range(c)])
        k, v = with_outliers((c, H, D), g), with_outliers((c, H, D), g, 0.5)
        write_kv_cache(k, v, kc, vc, slot, backend=backend, k_scale=ks, v_scale=vs)
        ks_orig.append(k), vs_orig.append(v), slots_all.append(slot)
    q = torch.randn((sum(q_lens), Hq, D), generator=g).to(q_dtype)
    cu = torch.tensor([0] + list(torch.tensor(q_lens).cumsum(0)), dtype=torch.int32)
    lens = torch.tensor(ctx_lens, dtype=torch.int32)
    kwargs = dict(k_scale=ks, v_scale=vs)
    if backend == "triton":
        out = tb.paged_attention(q, kc, vc, tables, cu, lens, **kwargs)
    else:
        out = paged_attention(q, kc, vc, tables, cu, lens, backend="torch", **kwargs)
    deq, orig = [], []
    for i, (c, ql) in enumerate(zip(ctx_lens, q_lens)):
        b, o = slots_all[i] // bs, slots_all[i] % bs
        kd = dequantize(kc[b, o], ks[b, o], torch.float64)
        vd = dequantize(vc[b, o], vs[b, o], torch.float64)
        qi = q[cu[i] : cu[i + 1]].double()
        deq.append(_dense(qi, kd, vd, c, ql))
        orig.append(_dense(qi, ks_orig[i].double(), vs_orig[i].double(), c, ql))
    return out, torch.cat(deq), torch.cat(orig)


def _dense(q, k, v, ctx, q_len):
    """float64 causal attention, written out: query j at position ctx - q_len + j."""
    group = q.shape[1] // k.shape[1]
    k = k.repeat_interleave(group, 1)
    v = v.repeat_interleave(group, 1)
    s = torch.einsum("qhd,khd->hqk", q, k) * q.shape[-1] ** -0.5
    pos = torch.arange(ctx - q_len, ctx)[:, None]
    s = s.masked_fill(torch.arange(ctx)[None, :] > pos, float("-inf"))
    return torch.einsum("hqk,khd->qhd", torch.softmax(s, -1), v)


def rel(a, b):
    return float((a.double() - b).norm() / b.norm())


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_attention_over_quantized_cache(fmt, backend, tb):
    out, deq, orig = _attention_case(fmt, backend, torch.float32, 3, tb)
    assert not out.isnan().any()
    assert rel(out, deq) < 1e-5, rel(out, deq)  # tight: only fp32 arithmetic differs
    e = rel(out, orig)
    assert e < LOOSE[fmt], e
    assert e > 1e-4  # the cache really is quantized (a float cache would be ~1e-7)


@pytest.mark.parametrize("fmt", FORMATS)
def test_triton_attention_bf16_queries(fmt, tb):
    out, deq, orig = _attention_case(fmt, "triton", torch.bfloat16, 4, tb)
    assert out.dtype == torch.bfloat16
    assert rel(out, deq) < 2e-2  # bf16 queries and probabilities (the float-cache tolerance)
    assert rel(out, orig) < LOOSE[fmt] + 2e-2


def _decode_case(fmt, seed, q_mult=1.0, k_mult=1.0, v_mult=1.0):
    """bf16 decode queries (5 sequences, one with 2 new tokens) over a quantized pool written
    by the Triton KV write; returns (args, kwargs, float64 attention over the dequantized
    cache with the bf16 queries)."""
    g = torch.Generator().manual_seed(seed)
    Hq, H, D, bs = 8, 2, 64, 16
    ctx_lens, q_lens = [70, 1, 33, 16, 130], [1, 1, 1, 2, 1]
    n_blocks = [-(-c // bs) for c in ctx_lens]
    raw, (kc, vc, ks, vs) = _pool(fmt, sum(n_blocks) + 2, bs, H, D)
    perm = torch.randperm(sum(n_blocks) + 2, generator=g).tolist()
    tables = torch.zeros((len(ctx_lens), max(n_blocks)), dtype=torch.int32)
    slots = []
    for i, (c, n) in enumerate(zip(ctx_lens, n_blocks)):
        blocks = [perm.pop() for _ in range(n)]
        tables[i, :n] = torch.tensor(blocks)
        slot = torch.tensor([blocks[p // bs] * bs + p % bs for p in range(c)])
        k = with_outliers((c, H, D), g, k_mult)
        v = with_outliers((c, H, D), g, v_mult)
        write_kv_cache(k, v, kc, vc, slot, backend="triton", k_scale=ks, v_scale=vs)
        slots.append(slot)
    q = (torch.randn((sum(q_lens), Hq, D), generator=g) * q_mult).to(torch.bfloat16)
    cu = torch.tensor([0] + list(torch.tensor(q_lens).cumsum(0)), dtype=torch.int32)
    lens = torch.tensor(ctx_lens, dtype=torch.int32)
    deq = []
    for i, (c, ql) in enumerate(zip(ctx_lens, q_lens)):
        b, o = slots[i] // bs, slots[i] % bs
        kd = dequantize(kc[b, o], ks[b, o], torch.float64)
        vd = dequantize(vc[b, o], vs[b, o], torch.float64)
        deq.append(_dense(q[cu[i] : cu[i + 1]].double(), kd, vd, c, ql))
    return (q, kc, vc, tables, cu, lens), dict(k_scale=ks, v_scale=vs), torch.cat(deq)


@pytest.mark.parametrize("fmt", FORMATS)
def test_fp16_products_match_float64(fmt, tb):
    """kv_cvt=1 (fp16 products: rows scaled by powers of two, P * v_scale over the tile's
    largest V scale) against float64 over the dequantized cache: bf16 output rounding (2**-9
    relative) dominates; measured 4e-4 .. 3.3e-3 (seeds 8, 9, 10), bound 5e-3. The old bf16
    products (kv_cvt=0: 5e-4 .. 8.3e-3) stay within the bf16 tolerance."""
    args, kw, ref = _decode_case(fmt, 8 if fmt == "int8" else 9)
    for cvt, tol in ((1, 5e-3), (0, 2e-2)):
        out = tb.paged_attention(*args, kv_cvt=cvt, **kw)
        assert out.dtype == torch.bfloat16 and not out.isnan().any()
        assert rel(out, ref) < tol, (cvt, rel(out, ref))
    split = tb.paged_attention(*args, kv_cvt=1, num_segments=3, **kw)
    assert rel(split, ref) < 5e-3


@pytest.mark.parametrize("fmt", FORMATS)
def test_fp16_products_keep_extreme_magnitudes(fmt, tb):
    """Queries of ~1e5 (fp16's largest is 65504: unscaled they overflow), keys of ~1e-5 (so
    the scores stay O(1)) and values of ~1e-7 (P * v_scale ~1e-9 is below fp16's smallest
    subnormal, 6e-8, unless divided by the tile's largest V scale): the fp16 path must still
    agree with float64 (same bound as at unit magnitudes; measured 3.1e-3 / 3.5e-3 for INT8 /
    FP8; without the two scalings both fail)."""
    args, kw, ref = _decode_case(fmt, 10, q_mult=1e5, k_mult=1e-5, v_mult=1e-7)
    out = tb.paged_attention(*args, kv_cvt=1, **kw)
    assert not out.isnan().any() and not out.isinf().any()
    assert rel(out, ref) < 5e-3, rel(out, ref)


def test_kv_cvt_choice(tb):
    bf = torch.zeros(1, 1, 8, dtype=torch.bfloat16)
    assert tb.kv_cvt_of(bf, quant=1) == 0  # INT8: bf16 products (the faster INT8 path)
    assert tb.kv_cvt_of(bf, quant=2) == 1  # FP8: fp16 products (no E4M3 -> bf16 F2F)
    assert tb.kv_cvt_of(bf.half(), quant=2) == 1
    assert tb.kv_cvt_of(bf, quant=0) == 0  # a float cache
    assert tb.kv_cvt_of(bf.float(), quant=2) == 0  # float32 queries: float32 products
    assert tb.kv_cvt_of(bf, quant=2, kv_cvt=0) == 0
    assert tb.kv_cvt_of(bf, quant=1, kv_cvt=1) == 1
    with pytest.raises(ValueError, match="kv_cvt must be"):
        tb.kv_cvt_of(bf, quant=1, kv_cvt=2)


def test_split_k_over_quantized_cache(tb):
    """Forced split-K segments merge to the unsplit result."""
    g = torch.Generator().manual_seed(5)
    Hq, H, D, bs, ctx = 4, 2, 32, 8, 300
    raw, (kc, vc, ks, vs) = _pool("fp8", ctx // bs + 2, bs, H, D)
    nbl = -(-ctx // bs)
    table = torch.arange(nbl, dtype=torch.int32)[None].flip(1).contiguous()
    slot = torch.tensor([int(table[0, p // bs]) * bs + p % bs for p in range(ctx)])
    write_kv_cache(
        with_outliers((ctx, H, D), g),
        with_outliers((ctx, H, D), g),
        kc,
        vc,
        slot,
        backend="triton",
        k_scale=ks,
        v_scale=vs,
    )
    q = torch.randn((1, Hq, D), generator=g)
    cu = torch.tensor([0, 1], dtype=torch.int32)
    lens = torch.tensor([ctx], dtype=torch.int32)
    a = tb.paged_attention(q, kc, vc, table, cu, lens, num_segments=1, k_scale=ks, v_scale=vs)
    b = tb.paged_attention(q, kc, vc, table, cu, lens, num_segments=4, k_scale=ks, v_scale=vs)
    # 40 segments: more than one 32-segment chunk of the merge, most of them empty
    c = tb.paged_attention(q, kc, vc, table, cu, lens, num_segments=40, k_scale=ks, v_scale=vs)
    r = torch_ref.paged_attention(q, kc, vc, table, cu, lens, k_scale=ks, v_scale=vs)
    assert rel(a, r.double()) < 1e-5 and rel(b, r.double()) < 1e-5 and rel(c, r.double()) < 1e-5


def test_scales_are_required_and_checked():
    raw, (kc, vc, ks, vs) = _pool("int8", 2, 4, 1, 8)
    k = torch.randn(1, 1, 8)
    with pytest.raises(ValueError, match="needs k_scale and v_scale"):
        write_kv_cache(k, k, kc, vc, torch.tensor([0]), backend="torch")
    with pytest.raises(ValueError, match="must be"):
        write_kv_cache(k, k, kc, vc, torch.tensor([0]), backend="torch", k_scale=ks[:1], v_scale=vs)
    fk = torch.zeros(2, 4, 1, 8)
    with pytest.raises(ValueError, match="unquantized"):
        write_kv_cache(k, k, fk, fk, torch.tensor([0]), backend="torch", k_scale=ks, v_scale=vs)


@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_block_layout_bytes_by_hand(backend, tb):
    """The default layout (kv_cache.quant.DEFAULT_LAYOUT) at block 4, one KV head, head_dim 2:
    K's values token-major, V's token-minor (byte ``d * block_size + token``), scales after
    the values at float ``head * block_size + token``. Token at slot 5 (block 1, offset 1),
    x = [2.54, -1.0]: scale 2.54 / 127 = 0.02, q = [127, round(-50)] = [127, -50]."""
    raw, (kc, vc, ks, vs) = _pool("int8", 2, 4, 1, 2)
    x = torch.tensor([[[2.54, -1.0]]])
    write_kv_cache(x, x, kc, vc, torch.tensor([5]), backend=backend, k_scale=ks, v_scale=vs)
    k_blk, v_blk = raw[0, 0, 1], raw[0, 1, 1]  # uint8 [4 * 1 * 2 + 4 * 4]
    assert k_blk[2:4].view(torch.int8).tolist() == [127, -50]  # token 1: bytes 2, 3
    assert v_blk[[1, 5]].view(torch.int8).tolist() == [127, -50]  # d0 at 0*4+1, d1 at 1*4+1
    assert int(v_blk[:8].count_nonzero()) == 2
    for blk in (k_blk, v_blk):
        scales = blk[8:].view(torch.float32)
        assert scales[1] == pytest.approx(0.02) and int(scales.count_nonzero()) == 1
    assert raw[0, :, 0].count_nonzero() == 0  # block 0 untouched


@pytest.mark.parametrize("fmt", FORMATS)
def test_bytes_past_the_context_never_reach_the_output(fmt, tb):
    """The kernel reads the context's last block whole (vector loads, token-minor V): NaN
    bytes (E4M3 0xFF) and NaN scales in its slots past the context must not leak (0 * NaN)."""
    g = torch.Generator().manual_seed(21)
    Hq, H, D, bs, ctx = 4, 2, 32, 16, 37  # the last block holds 5 of 16 tokens
    raw, (kc, vc, ks, vs) = _pool(fmt, 4, bs, H, D)
    raw.fill_(0xFF)  # E4M3 NaN (0xFF); INT8 -1; every scale a NaN (0xFFFFFFFF)
    assert ks.isnan().all()
    table = torch.tensor([[2, 0, 3, 1]], dtype=torch.int32)
    slot = torch.tensor([int(table[0, p // bs]) * bs + p % bs for p in range(ctx)])
    k, v = with_outliers((ctx, H, D), g), with_outliers((ctx, H, D), g)
    write_kv_cache(k, v, kc, vc, slot, backend="torch", k_scale=ks, v_scale=vs)
    q = torch.randn((1, Hq, D), generator=g).to(torch.bfloat16)
    cu = torch.tensor([0, 1], dtype=torch.int32)
    lens = torch.tensor([ctx], dtype=torch.int32)
    r = torch_ref.paged_attention(q, kc, vc, table, cu, lens, k_scale=ks, v_scale=vs)
    assert not r.isnan().any()
    for nseg in (1, 2):
        out = tb.paged_attention(
            q, kc, vc, table, cu, lens, num_segments=nseg, k_scale=ks, v_scale=vs
        )
        assert not out.isnan().any()
        assert rel(out, r.double()) < 2e-2  # bf16 queries and probabilities
