"""The torch reference paged attention against dense float64 attention computed here.

Fresh random inputs each run: ragged lengths, lengths that are not multiples of the block
size, a single decode token, a prompt with nothing cached (the causal square), new tokens
over a cached prefix, and block tables in random order. Tolerance: 1e-5 absolute in fp32
(values are O(1); the fp32 SDPA kernel's sums differ from float64 only by rounding).
"""

from __future__ import annotations

import pytest
import torch

from local_engine.attention import paged_attention, write_kv_cache


def dense_reference(q, k_ctx, v_ctx, q_len):
    """Plain float64 causal attention; k_ctx/v_ctx: [ctx, H, D] (already GQA-expanded)."""
    ctx = k_ctx.shape[0]
    s = torch.einsum("qhd,khd->hqk", q.double(), k_ctx.double()) * q.shape[-1] ** -0.5
    q_pos = torch.arange(ctx - q_len, ctx)[:, None]
    s = s.masked_fill((torch.arange(ctx)[None, :] > q_pos)[None], float("-inf"))
    return torch.einsum("hqk,khd->qhd", s.softmax(-1), v_ctx.double())


@pytest.mark.parametrize("block_size", [16, 32])
def test_torch_reference_matches_dense_float64(block_size):
    gen = torch.Generator().manual_seed(int(torch.randint(0, 2**31, (1,))))
    heads, kv_heads, head_dim = 6, 2, 32
    # (context length, new tokens): decode; prefill with nothing cached; prefix + chunk;
    # one token context; length not a multiple of the block size.
    cases = [
        (37, 1),
        (50, 50),
        (70, 9),
        (1, 1),
        (block_size, 3),
        (3 * block_size + 5, 2 * block_size),
    ]
    blocks_needed = sum(-(-c // block_size) for c, _ in cases)
    num_blocks = blocks_needed + 4
    k_cache = torch.full((num_blocks, block_size, kv_heads, head_dim), float("nan"))
    v_cache = torch.full_like(k_cache, float("nan"))
    perm = torch.randperm(num_blocks, generator=gen)
    # Entries past a sequence's blocks are padding; fill them with an out-of-range id.
    tables = torch.full((len(cases), 16), 10**6, dtype=torch.int32)
    used = 0
    k_full, v_full, slots = [], [], []
    for i, (ctx, _) in enumerate(cases):
        n = -(-ctx // block_size)
        tables[i, :n] = perm[used : used + n]
        used += n
        k_full.append(torch.randn(ctx, kv_heads, head_dim, generator=gen))
        v_full.append(torch.randn(ctx, kv_heads, head_dim, generator=gen))
        slots.append(
            torch.tensor(
                [int(tables[i, p // block_size]) * block_size + p % block_size for p in range(ctx)]
            )
        )
    # Write every context token through the slot mapping (the cached prefix and the new ones).
    write_kv_cache(
        torch.cat(k_full), torch.cat(v_full), k_cache, v_cache, torch.cat(slots), backend="torch"
    )
    q_lens = [ql for _, ql in cases]
    cu = torch.tensor([0] + torch.tensor(q_lens).cumsum(0).tolist(), dtype=torch.int32)
    q = torch.randn(int(cu[-1]), heads, head_dim, generator=gen)
    out = paged_attention(
        q,
        k_cache,
        v_cache,
        tables,
        cu,
        torch.tensor([c for c, _ in cases], dtype=torch.int32),
        backend="torch",
    )
    group = heads // kv_heads
    for i, (_, ql) in enumerate(cases):
        ref = dense_reference(
            q[cu[i] : cu[i + 1]],
            k_full[i].repeat_interleave(group, 1),
            v_full[i].repeat_interleave(group, 1),
            ql,
        )
        got = out[cu[i] : cu[i + 1]].double()
        assert not torch.isnan(got).any()
        torch.testing.assert_close(got, ref, atol=1e-5, rtol=1e-5)


def test_negative_slot_is_skipped():
    k_cache = torch.zeros(2, 4, 1, 2)
    v_cache = torch.zeros(2, 4, 1, 2)
    key = torch.tensor([[[1.0, 2.0]], [[3.0, 4.0]]])
    write_kv_cache(key, key * 10, k_cache, v_cache, torch.tensor([5, -1]), backend="torch")
    assert k_cache[1, 1, 0].tolist() == [1.0, 2.0]
    assert v_cache[1, 1, 0].tolist() == [10.0, 20.0]
    assert k_cache.sum().item() == 3.0  # only slot 5 was written


def test_unknown_backend_is_a_clear_error():
    q = torch.zeros(1, 2, 4)
    with pytest.raises(ValueError, match="unknown attention backend"):
        paged_attention(
            q,
            torch.zeros(1, 4, 1, 4),
            torch.zeros(1, 4, 1, 4),
            torch.zeros(1, 1, dtype=torch.int32),
            torch.tensor([0, 1], dtype=torch.int32),
            torch.tensor([1], dtype=torch.int32),
            backend="cuda-magic",
        )
