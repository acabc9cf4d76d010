"""Triton paged attention and KV write, run by the Triton interpreter on the CPU.

Every check draws fresh random inputs (the seed is printed in each failure message) and compares
the Triton backend with two oracles: the torch reference (``torch_ref``, which reads the same
paged cache) and dense float64 causal attention computed here from the per-sequence K/V
*before* they were scattered into the block pool (so block tables, slot arithmetic and the
layout are checked independently). Error is ``||out - ref|| / ||ref||`` over the whole output:
at most 1e-3 in fp32, 2e-2 in bf16, 1e-2 in fp16. Outputs and split-K scratch are poisoned
with NaN before each call (``triton_backend._alloc`` is replaced), so an element the kernel
forgets to write fails the no-NaN check; block-table entries past each sequence's length
hold out-of-range block ids and unused cache slots hold NaN, so reading past a context fails
too.
"""

from __future__ import annotations

import os

os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported anywhere in this process

import importlib
import random

import pytest
import torch

from local_engine.attention import torch_ref

TOL = {torch.float32: 1e-3, torch.bfloat16: 2e-2, torch.float16: 1e-2}


@pytest.fixture(scope="module")
def tb():
    """The Triton backend, interpreted (reloaded if triton was imported without the flag)."""
    from local_engine.attention import triton_attention, triton_int4, triton_kv_write

    if type(triton_attention.paged_attention_kernel).__name__ != "InterpretedFunction":
        importlib.reload(triton_int4)
        importlib.reload(triton_attention)
        importlib.reload(triton_kv_write)
    mod = importlib.import_module("local_engine.attention.triton_backend")
    mod = importlib.reload(mod)
    assert type(triton_attention.paged_attention_kernel).__name__ == "InterpretedFunction"
    return mod


@pytest.fixture(autouse=True)
def poison_allocations(tb, monkeypatch):
    def alloc(shape, dtype, device):
        return torch.full(shape, float("nan"), dtype=dtype, device=device)

    monkeypatch.setattr(tb, "_alloc", alloc)


def fresh_seed() -> int:
    return int.from_bytes(os.urandom(4), "little")


class Batch:
    """A random batch: per-sequence dense K/V and the same data scattered into a paged pool."""

    def __init__(
        self,
        ctx_lens,
        q_lens,
        *,
        num_heads,
        num_kv_heads,
        head_dim,
        block_size,
        dtype,
        seed,
        extra_blocks=3,
    ):
        g = torch.Generator().manual_seed(seed)
        self.seed = seed
        self.dtype = dtype
        self.ctx_lens, self.q_lens = list(ctx_lens), list(q_lens)
        self.num_heads, self.num_kv_heads, self.head_dim = num_heads, num_kv_heads, head_dim
        self.block_size = block_size
        n_blocks = [-(-c // block_size) for c in ctx_lens]
        num_blocks = sum(n_blocks) + extra_blocks
        # unused slots hold NaN: reading outside a context poisons the result
        self.k_cache = torch.full(
            (num_blocks, block_size, num_kv_heads, head_dim), float("nan"), dtype=dtype
        )
        self.v_cache = torch.full_like(self.k_cache, float("nan"))
        perm = torch.randperm(num_blocks, generator=g).tolist()  # block tables in random order
        width = max(n_blocks) + 2
        # entries past a sequence's length are out of range: they must never be dereferenced
        self.block_tables = torch.full(
            (len(ctx_lens), width), num_blocks + 10_000, dtype=torch.int32
        )
        self.k_dense, self.v_dense = [], []
        used = 0
        for i, c in enumerate(ctx_lens):
            blocks = perm[used : used + n_blocks[i]]
            used += n_blocks[i]
            self.block_tables[i, : n_blocks[i]] = torch.tensor(blocks, dtype=torch.int32)
            k = torch.randn(c, num_kv_heads, head_dim, generator=g).to(dtype)
            v = torch.randn(c, num_kv_heads, head_dim, generator=g).to(dtype)
            self.k_dense.append(k)
            self.v_dense.append(v)
            for p in range(c):
                b, o = blocks[p // block_size], p % block_size
                self.k_cache[b, o] = k[p]
                self.v_cache[b, o] = v[p]
        self.cu_seqlens_q = torch.tensor(
            [0] + torch.tensor(q_lens).cumsum(0).tolist(), dtype=torch.int32
        )
        self.seq_lens = torch.tensor(ctx_lens, dtype=torch.int32)
        self.q = torch.randn(int(self.cu_seqlens_q[-1]), num_heads, head_dim, generator=g).to(dtype)

    def args(self):
        return (
            self.q,
            self.k_cache,
            self.v_cache,
            self.block_tables,
            self.cu_seqlens_q,
            self.seq_lens,
        )

    def dense_float64(self, scale=None) -> torch.Tensor:
        """Causal attention in float64 on the dense per-sequence K/V (no paging)."""
        d = self.head_dim
        scale = d**-0.5 if scale is None else scale
        group = self.num_heads // self.num_kv_heads
        out = torch.zeros(self.q.shape, dtype=torch.float64)
        for i, (c, ql) in enumerate(zip(self.ctx_lens, self.q_lens)):
            s = int(self.cu_seqlens_q[i])
            for j in range(ql):
                pos = c - ql + j  # this query's position; it sees keys 0..pos
                for h in range(self.num_heads):
                    k = self.k_dense[i][: pos + 1, h // group].double()
                    v = self.v_dense[i][: pos + 1, h // group].double()
                    w = torch.softmax((k @ self.q[s + j, h].double()) * scale, dim=0)
                    out[s + j, h] = w @ v
        return out


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    return ((out.double() - ref.double()).norm() / ref.double().norm()).item()


def check(tb, batch: Batch, **kw):
    out = tb.paged_attention(*batch.args(), None, **kw)
    tag = (
        f"seed={batch.seed} dtype={batch.dtype} ctx={batch.ctx_lens} q={batch.q_lens} "
        f"H={batch.num_heads}/{batch.num_kv_heads} d={batch.head_dim} bs={batch.block_size} {kw}"
    )
    assert out.shape == batch.q.shape and out.dtype == batch.dtype, tag
    assert not torch.isnan(out).any(), f"unwritten or NaN output elements: {tag}"
    ref = torch_ref.paged_attention(*batch.args())
    dense = batch.dense_float64()
    tol = TOL[batch.dtype]
    e_ref, e_dense = rel_err(out, ref), rel_err(out, dense)
    assert e_ref <= tol, f"vs torch_ref: {e_ref:.2e} > {tol}: {tag}"
    assert e_dense <= tol, f"vs dense float64: {e_dense:.2e} > {tol}: {tag}"
    return out


# One mixed batch covers: prefill with no cached prefix (q_len == ctx), chunked prefill over a
# cached prefix, decode, a single-token context, a context of exactly one block and lengths
# that are not multiples of the block size.
def mixed_lens(bs):
    ctx = [bs + 7, 2 * bs + 5, 1, bs, 3 * bs + 1, 9]
    ql = [bs + 7, bs, 1, 1, 2, 9]
    return ctx, ql


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("head_dim", [64, 128])
@pytest.mark.parametrize("block_size", [16, 32])
def test_mixed_batch_matches_references(tb, dtype, head_dim, block_size):
    ctx, ql = mixed_lens(block_size)
    b = Batch(
        ctx,
        ql,
        num_heads=4,
        num_kv_heads=2,
        head_dim=head_dim,
        block_size=block_size,
        dtype=dtype,
        seed=fresh_seed(),
    )
    check(tb, b)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("num_segments", [1, 3])
def test_decode_batch(tb, dtype, num_segments):
    # decode-shaped call (one new token per sequence): takes the decode tile configuration
    ctx = [1, 15, 16, 17, 50, 100]
    b = Batch(
        ctx,
        [1] * len(ctx),
        num_heads=8,
        num_kv_heads=2,
        head_dim=64,
        block_size=16,
        dtype=dtype,
        seed=fresh_seed(),
    )
    check(tb, b, num_segments=num_segments)


@pytest.mark.parametrize("num_segments", [1, 3])
def test_decode_shaped_call_with_uneven_token_counts(tb, num_segments):
    # num_tokens == num_seqs takes the one-program-per-token DECODE mode, but here sequence 0
    # has 2 new tokens and sequence 1 none: programs 0 and 1 must find sequence 0 by search,
    # programs 2 and 3 take the fast path (cu_seqlens_q[i] == i, cu_seqlens_q[i + 1] == i + 1)
    b = Batch(
        [20, 33, 5, 40],
        [2, 0, 1, 1],
        num_heads=8,
        num_kv_heads=2,
        head_dim=64,
        block_size=16,
        dtype=torch.float32,
        seed=fresh_seed(),
    )
    check(tb, b, num_segments=num_segments)


@pytest.mark.parametrize("num_segments", [2, 5])
def test_split_k_on_prefill_and_mixed(tb, num_segments):
    # split-K with several query rows per sequence: segments beyond a row's causal limit
    # contribute nothing; a segment count larger than a short context's tiles leaves empty ones
    ctx, ql = mixed_lens(16)
    b = Batch(
        ctx,
        ql,
        num_heads=4,
        num_kv_heads=1,
        head_dim=64,
        block_size=16,
        dtype=torch.float32,
        seed=fresh_seed(),
    )
    check(tb, b, num_segments=num_segments)


@pytest.mark.parametrize("heads", [(4, 4), (6, 2), (8, 1), (12, 4)])
def test_gqa_groups(tb, heads):
    # MHA (G=1), a group of 3 (not a power of two), MQA (G=8), G=3 with several KV heads
    h, hkv = heads
    b = Batch(
        [21, 40, 3],
        [4, 1, 3],
        num_heads=h,
        num_kv_heads=hkv,
        head_dim=64,
        block_size=16,
        dtype=torch.float32,
        seed=fresh_seed(),
    )
    check(tb, b)


def test_sequence_with_no_new_tokens_and_custom_scale(tb):
    b = Batch(
        [20, 33, 5],
        [3, 0, 5],
        num_heads=4,
        num_kv_heads=2,
        head_dim=64,
        block_size=16,
        dtype=torch.float32,
        seed=fresh_seed(),
    )
    out = tb.paged_attention(*b.args(), 0.05)
    assert not torch.isnan(out).any()
    assert rel_err(out, b.dense_float64(scale=0.05)) <= 1e-3
    assert rel_err(out, torch_ref.paged_attention(*b.args(), 0.05)) <= 1e-3


def test_non_contiguous_q_and_dispatch(tb):
    # q as a view into a packed qkv projection (row stride > num_heads * head_dim)
    from local_engine.attention import paged_attention

    b = Batch(
        [30, 7],
        [6, 7],
        num_heads=4,
        num_kv_heads=2,
        head_dim=64,
        block_size=16,
        dtype=torch.float32,
        seed=fresh_seed(),
    )
    qkv = torch.randn(b.q.shape[0], 8, 64)
    qkv[:, :4] = b.q
    q_view = qkv[:, :4]
    assert not q_view.is_contiguous()
    out = paged_attention(q_view, *b.args()[1:], backend="triton")
    assert rel_err(out, b.dense_float64()) <= 1e-3


def test_rejects_bad_shapes(tb):
    b = Batch(
        [5],
        [5],
        num_heads=3,
        num_kv_heads=2,
        head_dim=64,
        block_size=16,
        dtype=torch.float32,
        seed=fresh_seed(),
    )
    with pytest.raises(ValueError, match="multiple of num_kv_heads"):
        tb.paged_attention(*b.args())
    q4 = torch.randn(5, 4, 64)
    with pytest.raises(ValueError, match="cu_seqlens_q"):
        tb.paged_attention(q4, b.k_cache, b.v_cache, b.block_tables, b.cu_seqlens_q[:1], b.seq_lens)
    with pytest.raises(ValueError, match="caches must be"):
        tb.paged_attention(
            torch.randn(5, 4, 128), b.k_cache, b.v_cache, b.block_tables, b.cu_seqlens_q, b.seq_lens
        )


def test_choose_num_segments_rule(tb):
    sm = 132
    # 4 * 132 = 528 target programs; segments = prev_pow2(floor(528 / programs))
    assert tb.choose_num_segments(num_programs=64 * 8, max_context=4096, sm_count=sm) == 1  # 1.03
    assert tb.choose_num_segments(num_programs=256 * 8, max_context=1024, sm_count=sm) == 1
    assert tb.choose_num_segments(num_programs=16 * 8, max_context=32768, sm_count=sm) == 4  # 4.1
    assert tb.choose_num_segments(num_programs=8 * 8, max_context=32768, sm_count=sm) == 8  # 8.25
    assert tb.choose_num_segments(num_programs=3 * 8, max_context=32768, sm_count=sm) == 16  # 22
    assert tb.choose_num_segments(num_programs=1, max_context=1 << 20, sm_count=sm) == 256  # cap
    # 16/2 heads at 1 x 32k: 2 programs -> 264 wanted, but no segment under 4 tiles:
    # 32768 / (4 x 64) = 128 segments of 256 tokens
    assert tb.choose_num_segments(num_programs=2, max_context=32768, sm_count=sm) == 128
    # 1024 tokens allow at most 4 segments of 4 x 64 (2 of 4 x 128)
    assert tb.choose_num_segments(num_programs=8, max_context=1024, sm_count=sm) == 4
    assert tb.choose_num_segments(num_programs=8, max_context=1024, sm_count=sm, tile_n=128) == 2
    assert tb.choose_num_segments(num_programs=8, max_context=511, sm_count=sm) == 1
    # 28/4 d64 1 x 32k (4 programs, 128-key tiles of 16 KiB): 132 wanted, 64 by length
    assert tb.choose_num_segments(4, 32768, sm, 128, 16384) == 64


def test_decode_config_keeps_the_tile_bytes(tb):
    # 16 KiB of K per tile: d128 bf16 64 keys (the tuned tile), d64 bf16 128
    assert tb.decode_config(128, 4, 2) == tb.KernelConfig(16, 64, 4, 2)
    assert tb.decode_config(64, 3, 2).tile_n == 128
    # 1-byte caches: 4 KiB tiles, one warp, 3 stages (d128: 4096 / 128 = 32 keys; d64: 64)
    assert tb.decode_config(128, 4, 1) == tb.KernelConfig(16, 32, 1, 3)
    assert tb.decode_config(64, 4, 1) == tb.KernelConfig(16, 64, 1, 3)
    assert tb.decode_config(128, 32, 2).block_m == 32  # a group wider than 16 rows
    sm = 132
    # group 7 (28/4): 32 KiB tiles (4 warps) below 2 x 132 programs (1 x 32k .. 32 x 8k), not
    # at 256 x 1k
    for programs in (4, 32, 128):
        assert tb.decode_config(128, 7, 2, programs, sm) == tb.KernelConfig(16, 128, 4, 2)
    assert tb.decode_config(128, 7, 2, 1024, sm) == tb.KernelConfig(16, 64, 4, 2)
    # group 8 (32/4): only below 132 / 8 programs (1 x 32k)
    assert tb.decode_config(128, 8, 2, 4, sm) == tb.KernelConfig(16, 128, 4, 2)
    assert tb.decode_config(128, 8, 2, 32, sm) == tb.KernelConfig(16, 64, 4, 2)
    # d64 (128-byte rows): never doubled; 3 stages below 132 / 8 programs
    assert tb.decode_config(64, 8, 2, 4, sm) == tb.KernelConfig(16, 128, 4, 3)
    assert tb.decode_config(64, 7, 2, 16, sm) == tb.KernelConfig(16, 128, 4, 3)  # 16 < 16.5
    assert tb.decode_config(64, 7, 2, 17, sm) == tb.KernelConfig(16, 128, 4, 2)
    assert tb.decode_config(64, 1, 2, 4, sm) == tb.KernelConfig(16, 128, 4, 3)
    # 1-byte caches: no doubling for wide groups, whatever the program count
    assert tb.decode_config(128, 7, 1, 4, sm) == tb.KernelConfig(16, 32, 1, 3)
    assert tb.decode_config(128, 32, 1, 4096, sm) == tb.KernelConfig(32, 32, 1, 3)
    # 1-byte decode sizes the split by 8 warps per SM: a 1-warp program is 65536 / 8 = 8 KiB
    # (8 programs per SM), a 2-warp one 16 KiB (4 per SM); prefill by the tile itself
    cfg1 = tb.decode_config(128, 4, 1, 64 * 8, sm)
    assert tb.split_tile_bytes(cfg1, 128, 1, decode=True) == 8192
    assert tb.split_tile_bytes(tb.KernelConfig(16, 64, 2, 3), 128, 1, decode=True) == 16384
    assert tb.split_tile_bytes(cfg1, 128, 1, decode=False) == 32 * 128
    assert tb.split_tile_bytes(tb.decode_config(128, 7, 2, 4, sm), 128, 2, True) == 32768
    # 64 x 4k: 8 * 132 // 512 = 2 segments; 16 x 32k: 1056 // 128 = 8; 256 x 1k: 0 -> 1
    assert tb.choose_num_segments(64 * 8, 4096, sm, 32, 8192) == 2
    assert tb.choose_num_segments(16 * 8, 32768, sm, 32, 8192) == 8
    assert tb.choose_num_segments(256 * 8, 1024, sm, 32, 8192) == 1
    # bf16 decode: 16 KiB, 4 programs per SM (64 x 4k: 1 segment, 16 x 32k: 4)
    assert tb.choose_num_segments(64 * 8, 4096, sm, 64, 16384) == 1
    assert tb.choose_num_segments(16 * 8, 32768, sm, 64, 16384) == 4
    # 32 KiB tiles halve the split target: 2 programs per SM
    assert tb.choose_num_segments(4, 32768, 132, 128, 32768) == 64


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_write_kv_cache(tb, dtype):
    seed = fresh_seed()
    g = torch.Generator().manual_seed(seed)
    num_blocks, bs, hkv, d = 6, 16, 3, 64
    k_cache = torch.full((num_blocks, bs, hkv, d), float("nan"), dtype=dtype)
    v_cache = torch.full_like(k_cache, float("nan"))
    n = 20
    slots = torch.randperm(num_blocks * bs, generator=g)[:n]
    slots[[3, 11]] = -1  # padding tokens are skipped
    key = torch.randn(n, hkv, d, generator=g).to(dtype)
    # value as a strided view (as from a fused projection)
    value = torch.randn(n, hkv, 2 * d, generator=g).to(dtype)[:, :, :d]
    tb.write_kv_cache(key, value, k_cache, v_cache, slots)
    for t in range(n):
        s = int(slots[t])
        if s < 0:
            continue
        assert torch.equal(k_cache[s // bs, s % bs], key[t]), f"seed={seed} token {t}"
        assert torch.equal(v_cache[s // bs, s % bs], value[t]), f"seed={seed} token {t}"
    written = set(int(s) for s in slots if s >= 0)
    flat_k = k_cache.view(num_blocks * bs, hkv, d)
    untouched = [s for s in range(num_blocks * bs) if s not in written]
    assert torch.isnan(flat_k[untouched].float()).all(), "a slot outside the mapping was written"
    # the same as the reference write
    k2 = torch.full_like(k_cache, float("nan"))
    v2 = torch.full_like(v_cache, float("nan"))
    torch_ref.write_kv_cache(key, value, k2, v2, slots)
    assert torch.equal(torch.nan_to_num(k2), torch.nan_to_num(k_cache))
    assert torch.equal(torch.nan_to_num(v2), torch.nan_to_num(v_cache))


def test_write_then_attend_end_to_end(tb):
    """Fill an empty (NaN) pool through the Triton write, prefill, then decode one token."""
    seed = fresh_seed()
    torch.Generator().manual_seed(seed)
    h, hkv, d, bs, dtype = 4, 2, 64, 16, torch.float32
    ctx = [19, 33]
    ref = Batch(
        ctx, ctx, num_heads=h, num_kv_heads=hkv, head_dim=d, block_size=bs, dtype=dtype, seed=seed
    )
    k_cache = torch.full_like(ref.k_cache, float("nan"))
    v_cache = torch.full_like(ref.v_cache, float("nan"))
    slot = []
    for i, c in enumerate(ctx):
        slot += [int(ref.block_tables[i, p // bs]) * bs + p % bs for p in range(c)]
    tb.write_kv_cache(
        torch.cat(ref.k_dense),
        torch.cat(ref.v_dense),
        k_cache,
        v_cache,
        torch.tensor(slot, dtype=torch.int64),
    )
    out = tb.paged_attention(
        ref.q, k_cache, v_cache, ref.block_tables, ref.cu_seqlens_q, ref.seq_lens
    )
    assert rel_err(out, ref.dense_float64()) <= 1e-3, f"seed={seed}"
    # decode: only the last token of each sequence, over the same cache
    q_dec = ref.q[ref.cu_seqlens_q[1:].long() - 1]
    cu = torch.arange(len(ctx) + 1, dtype=torch.int32)
    out_dec = tb.paged_attention(q_dec, k_cache, v_cache, ref.block_tables, cu, ref.seq_lens)
    assert rel_err(out_dec, out[ref.cu_seqlens_q[1:].long() - 1]) <= 1e-5, f"seed={seed}"


@pytest.mark.slow
@pytest.mark.parametrize("trial", range(12))
def test_random_sweep(tb, trial):
    """Random shapes: lengths, groups, dtypes, block sizes, head dims and split counts."""
    seed = fresh_seed()
    rng = random.Random(seed)
    n = rng.randint(1, 6)
    bs = rng.choice([16, 32])
    ctx = [rng.randint(1, 5 * bs) for _ in range(n)]
    ql = [rng.randint(0 if rng.random() < 0.1 else 1, c) if rng.random() < 0.5 else 1 for c in ctx]
    if sum(ql) == 0:
        ql[0] = 1
    hkv = rng.choice([1, 2, 3])
    h = hkv * rng.choice([1, 2, 3, 4, 8])
    b = Batch(
        ctx,
        ql,
        num_heads=h,
        num_kv_heads=hkv,
        head_dim=rng.choice([64, 128]),
        block_size=bs,
        dtype=rng.choice([torch.float32, torch.bfloat16, torch.float16]),
        seed=seed,
    )
    check(tb, b, num_segments=rng.choice([None, 1, 2, 4]))


def test_merge_segments_by_hand(tb):
    """The split-K merge on values worked out by hand: two segments with base-2 maxima 0 and 1
    and sums 1 and 3 weigh 1 * 2**(0 - 1) = 0.5 and 3 * 2**0 = 3, so out = (0.5 * a + 3 * b) /
    3.5; an empty segment (max -1e30, sum 0) weighs nothing; forced 2-segment chunks give the
    same (the online rescale between chunks)."""
    D = 4
    a = torch.tensor([1.0, -2.0, 0.5, 4.0])
    b = torch.tensor([3.0, 0.0, -1.0, 2.0])
    seg_out = torch.zeros(1, 2, 3, 16)
    seg_out[0, :, 0, :D] = a
    seg_out[0, :, 1, :D] = b
    seg_out[0, :, 2, :D] = 1e4  # the empty segment's (unused) output
    seg_max = torch.tensor([[[0.0, 1.0, -1.0e30]] * 2])
    seg_sum = torch.tensor([[[1.0, 3.0, 0.0]] * 2])
    expected = (0.5 * a + 3.0 * b) / 3.5  # [9.5, -1, -2.75, 8] / 3.5
    assert torch.allclose(expected, torch.tensor([19 / 7, -2 / 7, -5.5 / 7, 16 / 7]))
    for chunk in (None, 2):
        out = torch.full((1, 2, D), float("nan"))
        tb.merge_segments(out, seg_out, seg_max, seg_sum, seg_chunk=chunk)
        assert torch.allclose(out[0, 0], expected, atol=1e-6)
        assert torch.allclose(out[0, 1], expected, atol=1e-6)
    # the launch rule: every segment in one step up to 8192 values, else chunks of that size
    assert tb.merge_chunk(64, 128) == 64 and tb.merge_chunk(128, 64) == 128
    assert tb.merge_chunk(256, 64) == 128 and tb.merge_chunk(256, 128) == 64
    assert tb.merge_chunk(3, 128) == 4 and tb.merge_chunk(1, 64) == 2


def test_token_minor_rule(tb):
    """The kernel's contiguity hints only for unit-stride runs of a power-of-two block, every
    other stride a multiple of it, and a tile at least one block long."""
    from local_engine.kv_cache.quant import layer_views

    raw = torch.zeros(1, 2, 3, 16 * 2 * (8 + 4), dtype=torch.uint8)
    kc, vc, ks, vs = layer_views(raw, 16, 2, 8, torch.int8)[0]
    assert tb.token_minor_ok(vc, 64) and tb.token_minor_ok(ks, 64)
    assert not tb.token_minor_ok(kc, 64)  # K stays head_dim-minor
    assert not tb.token_minor_ok(vc, 8)  # a tile shorter than a block
    kc, vc, ks, vs = layer_views(raw, 16, 2, 8, torch.int8, "token_major")[0]
    assert not tb.token_minor_ok(vc, 64) and not tb.token_minor_ok(ks, 64)
    raw12 = torch.zeros(1, 2, 3, 12 * 2 * (8 + 4), dtype=torch.uint8)
    assert not tb.token_minor_ok(layer_views(raw12, 12, 2, 8, torch.int8)[0][1], 64)
