"""Triton kernel: write new tokens' K/V into the paged cache through the slot mapping.

One program per token copies that token's ``[num_kv_heads, head_dim]`` rows of K and V to flat
slot ``slot_mapping[t] = block * block_size + offset`` of the caches; a negative slot skips the
token (padding). One launch per layer.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _write_kv_kernel(
    key_ptr,
    value_ptr,
    k_cache_ptr,
    v_cache_ptr,
    slot_ptr,
    stride_kt,
    stride_kh,
    stride_vt,
    stride_vh,
    stride_kcb,
    stride_kct,
    stride_kch,
    stride_vcb,
    stride_vct,
    stride_vch,
    BLOCK_SIZE: tl.constexpr,
    NUM_KV_HEADS: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    HEADS_PAD: tl.constexpr,
    DIM_PAD: tl.constexpr,
):
    t = tl.program_id(0)
    slot = tl.load(slot_ptr + t).to(tl.int64)
    if slot >= 0:
        blk = slot // BLOCK_SIZE
        off = slot % BLOCK_SIZE
        h = tl.arange(0, HEADS_PAD)
        d = tl.arange(0, DIM_PAD)
        mask = (h < NUM_KV_HEADS)[:, None] & (d < HEAD_DIM)[None, :]
        t64 = t.to(tl.int64)
        k = tl.load(key_ptr + t64 * stride_kt + h[:, None] * stride_kh + d[None, :], mask=mask)
        v = tl.load(value_ptr + t64 * stride_vt + h[:, None] * stride_vh + d[None, :], mask=mask)
        kc = (
            k_cache_ptr + blk * stride_kcb + off * stride_kct + h[:, None] * stride_kch + d[None, :]
        )
        vc = (
            v_cache_ptr + blk * stride_vcb + off * stride_vct + h[:, None] * stride_vch + d[None, :]
        )
        tl.store(kc, k.to(k_cache_ptr.dtype.element_ty), mask=mask)
        tl.store(vc, v.to(v_cache_ptr.dtype.element_ty), mask=mask)


def write_kv_cache(
    key: torch.Tensor,
    value: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
) -> None:
    """See :func:`local_engine.attention.write_kv_cache`.

    Raises:
        ValueError: shapes that disagree (token counts, heads, head_dim) or a cache whose
            last dimension is not contiguous.
    """
    if key.dim() != 3 or value.shape != key.shape:
        raise ValueError(
            f"key/value must both be [num_tokens, num_kv_heads, head_dim]; got "
            f"{tuple(key.shape)} and {tuple(value.shape)}"
        )
    num_tokens, num_kv_heads, head_dim = key.shape
    if (
        k_cache.shape != v_cache.shape
        or k_cache.dim() != 4
        or tuple(k_cache.shape[2:]) != (num_kv_heads, head_dim)
    ):
        raise ValueError(
            f"caches must be [num_blocks, block_size, {num_kv_heads}, {head_dim}]; got "
            f"{tuple(k_cache.shape)} and {tuple(v_cache.shape)}"
        )
    if slot_mapping.shape != (num_tokens,):
        raise ValueError(f"slot_mapping must be [{num_tokens}]; got {tuple(slot_mapping.shape)}")
    if k_cache.stride(3) != 1 or v_cache.stride(3) != 1:
        raise ValueError("k_cache/v_cache need a contiguous last (head_dim) dimension")
    if num_tokens == 0:
        return
    if key.stride(2) != 1:
        key = key.contiguous()
    if value.stride(2) != 1:
        value = value.contiguous()
    _write_kv_kernel[(num_tokens,)](
        key,
        value,
        k_cache,
        v_cache,
        slot_mapping,
        key.stride(0),
        key.stride(1),
        value.stride(0),
        value.stride(1),
        k_cache.stride(0),
        k_cache.stride(1),
        k_cache.stride(2),
        v_cache.stride(0),
        v_cache.stride(1),
        v_cache.stride(2),
        BLOCK_SIZE=k_cache.shape[1],
        NUM_KV_HEADS=num_kv_heads,
        HEAD_DIM=head_dim,
        HEADS_PAD=triton.next_power_of_2(num_kv_heads),
        DIM_PAD=triton.next_power_of_2(head_dim),
        num_warps=4 if num_kv_heads * head_dim >= 512 else 1,
    )
