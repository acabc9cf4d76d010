"""KIVI-style 2-bit KV cache (``kv_cache_dtype="int2"``, :mod:`local_engine.kv_cache.int2`):
packing and the asymmetric arithmetic by hand, round trips within the derived bounds on data
with outlier channels, the residual window (an open block's tokens kept bit-exact in the model
dtype in its residual slot; the write that fills the block quantizes exactly what a direct
per-channel quantization of its tokens gives), the write through the slot mapping (torch and
the Triton write + finalize kernels under the interpreter, the fused rotary + write too), and
paged attention over int2 pools against float64 attention over (the dequantized finished
blocks + the exact residual) (tight) and over the original values (loose, stated).

Every reference here is built from the original tokens with :func:`int2.quantize_asym` (checked
by hand below): a finished block's keys quantized per (head, channel) over its 16 tokens, its
values per (token, head); an open block's tokens as they are.

Bounds (derived in :mod:`local_engine.kv_cache.int2`): values ``|v - v'| <= (max - min) / 6 *
(1 + 2**-10)`` per token-head; a finished block's keys ``|k_c - k'_c| <= (max_c - min_c) / 6 *
(1 + 2**-10)`` per (head, channel) over the block's tokens.

Attention over the original values: 0.7 relative over the whole output (keys with two x10
outlier channels and per-channel offsets, Gaussian values, head_dim 32: 2 bits a value);
measured 0.53 (seeds 3, 4, both backends; against the dequantized reference 2.6e-7 to
3.9e-7).
"""

from __future__ import annotations

import os

os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported anywhere in this process

import importlib

import pytest
import torch

from local_engine import ops
from local_engine.attention import paged_attention, write_kv_cache
from local_engine.kv_cache import int2

from .test_kv_quant import _dense, rel, with_outliers

LOOSE_INT2 = 0.7
F16 = 1 + 2.0**-10  # a float16 scale or minimum: at most 2**-11 relative, twice for slack
BS = 16


@pytest.fixture(scope="module")
def tb():
    """The Triton backend, interpreted (reloaded if triton was imported without the flag)."""
    from local_engine.attention import triton_attention, triton_int2, triton_int4, triton_kv_write
    from local_engine.ops import triton_ops

    if type(triton_attention.paged_attention_kernel).__name__ != "InterpretedFunction":
        importlib.reload(triton_kv_write)
        importlib.reload(triton_int2)
        importlib.reload(triton_int4)
        importlib.reload(triton_attention)
        importlib.reload(triton_ops)
    return importlib.reload(importlib.import_module("local_engine.attention.triton_backend"))


class Pool:
    """One layer's int2 pool with ``slots`` residual slots handed out in order."""

    def __init__(self, nb, heads, d, slots=8, dtype=torch.float32, bs=BS):
        self.raw, (self.views,) = int2.allocate(1, nb, bs, heads, d, "cpu", slots, dtype)
        self.per = int2.Layout(bs, heads, d).blocks_per_slot(dtype.itemsize)
        self.next = nb

    def open(self, block: int) -> int:
        """Give ``block`` the next residual slot (as the cache manager and runner do)."""
        slot, self.next = self.next, self.next + self.per
        int2.set_residual_ids(self.raw, [block], [slot])
        return slot


def _write(backend, k, v, pool, slots):
    kc, vc, ks, vs = pool.views
    write_kv_cache(k, v, kc, vc, slots, backend=backend, k_scale=ks, v_scale=vs)


def _direct(k, v):
    """Dequantized K and V of whole blocks ``[n * 16, H, D]``, quantized straight from the
    tokens: keys per (block, head, channel), values per (token, head); float64."""
    kb, vb = k.double().unflatten(0, (-1, BS)), v.double().unflatten(0, (-1, BS))
    kq = int2.dequantize_asym(*int2.quantize_asym(kb, 1), 1)
    vq = int2.dequantize_asym(*int2.quantize_asym(vb, -1), -1)
    return kq.flatten(0, 1).double(), vq.flatten(0, 1).double()


def _reference(k, v):
    """float64 K, V a cache holds for the context ``k, v`` ``[c, H, D]``: finished blocks
    dequantized (:func:`_direct`), the open block's tokens exactly."""
    c = k.shape[0]
    full = c // BS * BS
    kd, vd = _direct(k[:full], v[:full]) if full else (k[:0].double(), v[:0].double())
    return torch.cat((kd, k[full:].double())), torch.cat((vd, v[full:].double()))


# ---- arithmetic ------------------------------------------------------------------------------
def test_pack_layout_by_hand():
    # head_dim 8: byte j = q[j] | q[j + 2] << 2 | q[j + 4] << 4 | q[j + 6] << 6
    q = torch.tensor([[0, 1, 2, 3, 3, 2, 1, 0]])
    p = int2.pack_int2(q)
    assert p.dtype == torch.uint8 and p.tolist() == [
        [0 | 2 << 2 | 3 << 4 | 1 << 6, 1 | 3 << 2 | 2 << 4]
    ]
    assert p.tolist() == [[120, 45]]
    assert int2.unpack_int2(p).tolist() == q.tolist()
    every = torch.randint(0, 4, (5, 64))
    assert torch.equal(int2.unpack_int2(int2.pack_int2(every)), every.to(torch.uint8))


def test_asymmetric_arithmetic_by_hand():
    # min 1, max 2.5: scale 0.5 (exact in float16), codes 0..3 exactly, read back exactly
    x = torch.tensor([1.0, 1.5, 2.0, 2.5])
    codes, s, m = int2.quantize_asym(x, 0)
    assert s.dtype == torch.float16 and float(s) == 0.5 and float(m) == 1.0
    assert codes.tolist() == [0, 1, 2, 3]
    assert torch.equal(int2.dequantize_asym(codes, s, m, 0), x)
    # min -1, max 2: scale 1; 0.2 -> (0.2 + 1) / 1 = 1.2 -> code 1 -> 0.0 (error 0.2 <= 0.5)
    codes, s, m = int2.quantize_asym(torch.tensor([-1.0, 0.2, 2.0]), 0)
    assert codes.tolist() == [0, 1, 3]
    assert int2.dequantize_asym(codes, s, m, 0).tolist() == [-1.0, 0.0, 2.0]
    # a constant row: scale 0, every code 0, read back as the minimum
    codes, s, m = int2.quantize_asym(torch.full((4,), 3.25), 0)
    assert float(s) == 0 and codes.tolist() == [0] * 4
    assert int2.dequantize_asym(codes, s, m, 0).tolist() == [3.25] * 4


def test_block_bytes_by_hand():
    # block 16, 2 KV heads, D 32: codes 16 x 2 x 8 = 256 B each for K and V, K scales and
    # minima 2 x 2 x 32 x 2 = 256 B, V scale and minimum 16 x 2 x 4 = 128 B: 896 B
    lay = int2.Layout(16, 2, 32)
    assert (lay.v_codes, lay.k_meta, lay.v_pairs, lay.block_bytes) == (256, 512, 768, 896)
    # a float32 residual slot: 2 x 16 x 2 x 32 x 4 = 8,192 B = 9.14 blocks -> 10
    assert lay.residual_bytes(4) == 8_192 and lay.blocks_per_slot(4) == 10
    raw, _ = int2.allocate(3, 5, 16, 2, 32, "cpu", 2, torch.float32)
    assert raw.shape == (3, 1, 5 + 2 * 10, 896)


def test_value_round_trip_within_the_bound():
    g = torch.Generator().manual_seed(1)
    v = with_outliers((64, 4, 128), g)
    v[3, 1] = 0.0
    codes, s, m = int2.quantize_asym(v, -1)
    back = int2.dequantize_asym(codes, s, m, -1).double()
    rng = (v.amax(-1) - v.amin(-1)).double()
    lim = rng.unsqueeze(-1) / 6 * F16 + 1e-6 * v.abs().amax(-1, keepdim=True).double()
    err = (back - v.double()).abs()
    assert (err <= lim).all() and err.max() > 0
    assert (back[3, 1] == 0).all()


def _block_keys(g, bs=BS, heads=2, d=64):
    k = torch.randn(bs, heads, d, generator=g)
    k[..., [5, d - 3]] *= 20  # outlier channels (KIVI section 3)
    k[..., d - 3] += 10  # ... one of them off-centre, where a minimum pays
    return k


def test_finished_block_keys_within_the_bound_and_beat_per_token():
    g = torch.Generator().manual_seed(2)
    heads, d = 2, 64
    pool = Pool(3, heads, d)
    k = _block_keys(g, BS, heads, d)
    v = torch.randn(BS, heads, d, generator=g)
    _write("torch", k, v, pool, torch.arange(BS) + BS)  # block 1, whole in one call
    kc, vc, ks, vs = pool.views
    back, _ = int2.read_blocks(kc, vc, ks, vs, torch.tensor([1]), torch.tensor([True]), k.dtype)
    rng = (k.amax(0) - k.amin(0)).double()  # [heads, d]
    err = (back[0].double() - k.double()).abs()
    assert (err <= rng / 6 * F16 + 1e-6).all()
    # per channel beats per token at 2 bits on outlier channels (KIVI's argument)
    codes, s, m = int2.quantize_asym(k, -1)
    per_token = int2.dequantize_asym(codes, s, m, -1).double()
    assert err.norm() < 0.7 * (per_token - k.double()).norm()  # measured 0.52x


# ---- the residual window and the block-fill transition ----------------------------------------
@pytest.mark.parametrize("backend", ["torch", "triton"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_residual_is_exact_and_the_fill_quantizes_directly(backend, dtype, tb):
    """A block opened by a 5-token prompt, grown by decodes and a 3-token chunk, filled by a
    last decode: while open its tokens sit bit-exact in the model dtype in its residual slot
    and the block's 2-bit bytes are untouched; the fill writes exactly the codes, scales and
    minima of quantizing its 16 tokens directly (keys per channel, values per token); a
    block whole in one call gets the same bytes without a slot."""
    g = torch.Generator().manual_seed(7)
    heads, d = 2, 32
    k = (with_outliers((BS, heads, d), g) + 3 * torch.randn(d, generator=g)).to(dtype)
    v = with_outliers((BS, heads, d), g, 0.3).to(dtype)
    pool = Pool(4, heads, d, dtype=dtype)
    slot = pool.open(2)
    kc, vc, ks, vs = pool.views
    slots = torch.arange(BS) + 2 * BS
    for lo, hi in ((0, 5), (5, 6), (6, 9), (9, 12), (12, 15)):
        _write(backend, k[lo:hi], v[lo:hi], pool, slots[lo:hi])
        res = int2.read_residual(kc, torch.tensor([slot]), dtype)[0]
        assert torch.equal(res[0, :hi], k[:hi]) and torch.equal(res[1, :hi], v[:hi])
        assert int2.residual_ids(kc)[2] == slot  # the 2-bit bytes: only the slot id so far
        assert (vc[2] == 0).all() and (ks[2] == 0).all() and (vs[2] == 0).all()
    _write(backend, k[15:], v[15:], pool, slots[15:])  # the fill
    kq, ksq, kmq = int2.quantize_asym(k, 0)  # per (head, channel) over the 16 tokens
    vq, vsq, vmq = int2.quantize_asym(v, -1)  # per (token, head)
    assert torch.equal(kc[2], int2.pack_int2(kq)) and torch.equal(vc[2], int2.pack_int2(vq))
    assert torch.equal(ks[2], torch.stack((ksq, kmq), 1))
    assert torch.equal(vs[2], torch.stack((vsq, vmq), -1))
    # the same 16 tokens whole in one call, no slot: the same bytes
    other = Pool(4, heads, d, dtype=dtype)
    _write(backend, k, v, other, torch.arange(BS) + BS)
    for a, b in zip(other.views, pool.views):
        assert torch.equal(a[1], b[2])


@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_write_through_slot_mapping(backend, tb):
    """A prompt of 40 tokens in pieces (a prefill, decodes, a chunk, padding rows): blocks 2
    and 3 finished, block 4 open with 8 tokens; the torch and Triton bytes agree with the
    direct quantization; the untouched blocks stay zero."""
    g = torch.Generator().manual_seed(4)
    nb, heads, d = 6, 2, 32
    k = with_outliers((40, heads, d), g) + 3 * torch.randn(d, generator=g)
    v = with_outliers((40, heads, d), g, 0.3)
    slots = torch.arange(40) + 2 * BS
    pool = Pool(nb, heads, d)
    rid3, rid4 = pool.open(3), pool.open(4)  # block 3 is left open by the first piece
    for lo, hi in ((0, 20), (20, 21), (21, 30), (30, 31), (31, 40)):
        pad = torch.cat((slots[lo:hi], torch.tensor([-1])))  # a padding row is skipped
        kk, vv = torch.cat((k[lo:hi], k[:1])), torch.cat((v[lo:hi], v[:1]))
        _write(backend, kk, vv, pool, pad)
    kc, vc, ks, vs = pool.views
    kd, vd = int2.read_blocks(
        kc, vc, ks, vs, torch.tensor([2, 3, 4]), torch.tensor([1, 1, 0]) > 0, k.dtype
    )
    want_k, want_v = _reference(k, v)
    assert torch.equal(kd.flatten(0, 1)[:40].double(), want_k)
    assert torch.equal(vd.flatten(0, 1)[:40].double(), want_v)
    assert int2.residual_ids(kc)[4] == rid4 and rid3 != rid4
    for t in pool.views:
        assert (t[torch.tensor([0, 1, 5])] == 0).all()


# ---- attention ---------------------------------------------------------------------------------
def _attention_case(backend, dtype, seed, tb, decode=False):
    """A mixed batch (decode, prefill over a cached prefix, a whole prompt, a one-token
    context) over an int2 pool in random blocks, each context written as a prompt then its
    last tokens one by one (the blocks they touch opened in residual slots first). Returns
    (out, float64 over the dequantized finished blocks + exact residual, float64 over the
    originals)."""
    g = torch.Generator().manual_seed(seed)
    hq, heads, d = 6, 2, 32
    ctx_lens, q_lens = [37, 23, 32, 1], [1, 7, 32, 1]
    if decode:  # every sequence one new token: the kernel's DECODE mode and decode tiles
        ctx_lens, q_lens = [37, 48, 16, 70], [1, 1, 1, 1]
    n_blocks = [-(-c // BS) for c in ctx_lens]
    nb = sum(n_blocks) + 3
    pool = Pool(nb, heads, d, slots=2 * len(ctx_lens), dtype=dtype)
    perm = torch.randperm(nb, generator=g).tolist()
    tables = torch.zeros((len(ctx_lens), max(n_blocks)), dtype=torch.int32)
    originals, refs = [], []
    for i, (c, n) in enumerate(zip(ctx_lens, n_blocks)):
        blocks = [perm.pop() for _ in range(n)]
        tables[i, :n] = torch.tensor(blocks)
        slot = torch.tensor([blocks[p // BS] * BS + p % BS for p in range(c)])
        k = torch.randn((c, heads, d), generator=g) + 2 * torch.randn(d, generator=g)
        k[..., [3, d - 5]] *= 10  # outlier channels
        v = torch.randn((c, heads, d), generator=g) * 0.5
        k, v = k.to(dtype), v.to(dtype)
        cut = max(c - 3, 1)
        for b in {blocks[(cut - 1) // BS], blocks[(c - 1) // BS]}:
            pool.open(b)  # the blocks the decodes write (their early tokens went there too)
        for lo, hi in [(0, cut)] + [(j, j + 1) for j in range(cut, c)]:
            _write(backend, k[lo:hi], v[lo:hi], pool, slot[lo:hi])
        originals.append((k, v))
        refs.append(_reference(k, v))
    q = torch.randn((sum(q_lens), hq, d), generator=g).to(dtype)
    cu = torch.tensor([0] + list(torch.tensor(q_lens).cumsum(0)), dtype=torch.int32)
    lens = torch.tensor(ctx_lens, dtype=torch.int32)
    kc, vc, ks, vs = pool.views
    if backend == "triton":
        out = tb.paged_attention(q, kc, vc, tables, cu, lens, k_scale=ks, v_scale=vs)
    else:
        out = paged_attention(q, kc, vc, tables, cu, lens, backend="torch", k_scale=ks, v_scale=vs)
    deq, orig = [], []
    for i, (c, ql) in enumerate(zip(ctx_lens, q_lens)):
        qi = q[cu[i] : cu[i + 1]].double()
        deq.append(_dense(qi, *refs[i], c, ql))
        orig.append(_dense(qi, originals[i][0].double(), originals[i][1].double(), c, ql))
    return out, torch.cat(deq), torch.cat(orig)


@pytest.mark.parametrize("backend", ["torch", "triton"])
@pytest.mark.parametrize("seed", [3, 4])
def test_attention_over_int2_cache(backend, seed, tb):
    out, deq, orig = _attention_case(backend, torch.float32, seed, tb)
    assert not out.isnan().any()
    assert rel(out, deq) < 1e-5, rel(out, deq)  # tight: only fp32 arithmetic differs
    e = rel(out, orig)
    assert 1e-2 < e < LOOSE_INT2, e


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_triton_decode_batch_over_int2_cache(dtype, tb):
    out, deq, orig = _attention_case("triton", dtype, 5, tb, decode=True)
    assert rel(out, deq) < (1e-5 if dtype == torch.float32 else 2e-2)
    assert rel(out, orig) < LOOSE_INT2 + 2e-2


@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_bf16_over_int2_cache(backend, tb):
    """bf16 model: a bf16 residual, bf16 products of the dequantized keys and values."""
    out, deq, orig = _attention_case(backend, torch.bfloat16, 4, tb)
    assert out.dtype == torch.bfloat16
    assert rel(out, deq) < 2e-2
    assert rel(out, orig) < LOOSE_INT2 + 2e-2


def test_fused_rotary_write_matches_the_torch_reference(tb):
    from local_engine.models.llama import RotaryEmbedding

    g = torch.Generator().manual_seed(11)
    T, heads, kv_heads, d, nb = 20, 6, 2, 32, 3
    rope = RotaryEmbedding(d, 300, 10000.0, None)
    q = torch.randn(T, heads, d, generator=g)
    k = torch.randn(T, kv_heads, d, generator=g) * 3
    v = torch.randn(T, kv_heads, d, generator=g) * 0.2
    pos = torch.arange(T)
    slots = torch.arange(T) + BS  # block 1 filled, block 2 open
    a, r = Pool(nb, kv_heads, d), Pool(nb, kv_heads, d)
    a.open(2), r.open(2)
    out = ops.rotary_and_write_kv(
        q.clone(), k, v, pos, rope.cos, rope.sin, *a.views[:2], slots, "triton", *a.views[2:]
    )
    ref = ops.rotary_and_write_kv(
        q.clone(), k, v, pos, rope.cos, rope.sin, *r.views[:2], slots, "torch", *r.views[2:]
    )
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
    for x, y in zip(a.views, r.views):
        assert torch.equal(x[1], y[1])
    kc, rc = a.views[0], r.views[0]
    ra = int2.read_residual(kc, int2.residual_ids(kc)[2:3], torch.float32)[0, :, :4]
    rr = int2.read_residual(rc, int2.residual_ids(rc)[2:3], torch.float32)[0, :, :4]
    torch.testing.assert_close(ra, rr, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("garbage", [0x7FFFFFFF, -1])
def test_triton_padding_over_a_finished_block_reads_nothing_stray(garbage, tb):
    """A CUDA graph's padding sequence reads block 0 with a 1-token context: block 0 is
    finished (its first 4 bytes are 2-bit codes, here forced to ``garbage`` as a slot id);
    the slot id is clamped into the pool, the kernel reads no stray memory and the real
    sequence beside it equals the torch reference."""
    g = torch.Generator().manual_seed(9)
    heads, d = 2, 32
    pool = Pool(4, heads, d)
    kc, vc, ks, vs = pool.views
    k, v = torch.randn(BS, heads, d, generator=g), torch.randn(BS, heads, d, generator=g)
    _write("torch", k, v, pool, torch.arange(BS))  # block 0 whole: finished
    pool.open(1)
    _write("torch", k[:5], v[:5], pool, torch.arange(5) + BS)  # block 1 open: 5 tokens
    int2.layer_bytes(kc)[0, :4].view(torch.int32)[0] = garbage
    tables = torch.tensor([[0, 1], [0, 0]], dtype=torch.int32)
    q = torch.randn(2, 4, d, generator=g)
    cu, lens = torch.tensor([0, 1, 2], dtype=torch.int32), torch.tensor([21, 1], dtype=torch.int32)
    out = tb.paged_attention(q, kc, vc, tables, cu, lens, k_scale=ks, v_scale=vs)
    ref = paged_attention(
        q[:1], kc, vc, tables[:1], cu[:2], lens[:1], backend="torch", k_scale=ks, v_scale=vs
    )
    assert rel(out[:1], ref.double()) < 1e-5
