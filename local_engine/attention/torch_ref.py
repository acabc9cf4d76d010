"""Reference paged attention in plain torch (any device, any float dtype).

Clear rather than fast: for each sequence it gathers the context's K/V through the block
table and runs causal softmax attention in float32. It is the oracle the Triton kernels are
tested against and the engine's CPU path.
"""

from __future__ import annotations

from typing import Optional

import torch


def write_kv_cache(
    key: torch.Tensor,
    value: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
) -> None:
    """See :func:`local_engine.attention.write_kv_cache`."""
    num_blocks, block_size = k_cache.shape[:2]
    slots = slot_mapping.to(torch.long)
    keep = slots >= 0
    if not bool(keep.all()):
        slots, key, value = slots[keep], key[keep], value[keep]
    k_cache.view(num_blocks * block_size, *k_cache.shape[2:])[slots] = key.to(k_cache.dtype)
    v_cache.view(num_blocks * block_size, *v_cache.shape[2:])[slots] = value.to(v_cache.dtype)


def paged_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    cu_seqlens_q: torch.Tensor,
    seq_lens: torch.Tensor,
    scale: Optional[float] = None,
) -> torch.Tensor:
    """See :func:`local_engine.attention.paged_attention`."""
    num_tokens, num_heads, head_dim = q.shape
    block_size, num_kv_heads = k_cache.shape[1], k_cache.shape[2]
    if num_heads % num_kv_heads:
        raise ValueError(f"num_heads={num_heads} is not a multiple of num_kv_heads={num_kv_heads}")
    group = num_heads // num_kv_heads
    if scale is None:
        scale = head_dim ** -0.5
    out = torch.empty_like(q)
    cu = cu_seqlens_q.tolist()
    lens = seq_lens.tolist()
    for i, ctx in enumerate(lens):
        start, end = cu[i], cu[i + 1]
        q_len = end - start
        if q_len == 0:
            continue
        n_blocks = (ctx + block_size - 1) // block_size
        blocks = block_tables[i, :n_blocks].to(torch.long)
        k = k_cache[blocks].reshape(-1, num_kv_heads, head_dim)[:ctx].float()
        v = v_cache[blocks].reshape(-1, num_kv_heads, head_dim)[:ctx].float()
        k = k.repeat_interleave(group, dim=1)  # [ctx, H, D]
        v = v.repeat_interleave(group, dim=1)
        qi = q[start:end].float()  # [q_len, H, D]
        scores = torch.einsum("qhd,khd->hqk", qi, k) * scale
        q_pos = torch.arange(ctx - q_len, ctx, device=q.device)[:, None]
        k_pos = torch.arange(ctx, device=q.device)[None, :]
        scores.masked_fill_((k_pos > q_pos)[None], float("-inf"))
        probs = torch.softmax(scores, dim=-1)
        out[start:end] = torch.einsum("hqk,khd->qhd", probs, v).to(q.dtype)
    return out
