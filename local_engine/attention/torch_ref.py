"""Reference paged attention in plain torch (any device, any float dtype).

Clear rather than fast: for each sequence it gathers the context's K/V through the block
table and runs ``torch.nn.functional.scaled_dot_product_attention`` (float32 for
half-precision inputs): causal for a prompt with nothing cached, an explicit offset-causal
mask for new tokens over a cached prefix. It is the oracle the Triton kernels are tested
against and the engine's CPU path.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from local_engine.kv_cache.quant import dequantize, is_quantized, quantize


def write_kv_cache(
    key: torch.Tensor,
    value: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
    k_scale: torch.Tensor | None = None,
    v_scale: torch.Tensor | None = None,
) -> None:
    """See :func:`local_engine.attention.write_kv_cache`. A quantized cache gets
    :func:`~local_engine.kv_cache.quant.quantize` of each token-head (values and scale)."""
    num_blocks, block_size = k_cache.shape[:2]
    slots = slot_mapping.to(torch.long)
    keep = slots >= 0
    if not bool(keep.all()):
        slots, key, value = slots[keep], key[keep], value[keep]
    if not is_quantized(k_cache):
        k_cache.view(num_blocks * block_size, *k_cache.shape[2:])[slots] = key.to(k_cache.dtype)
        v_cache.view(num_blocks * block_size, *v_cache.shape[2:])[slots] = value.to(v_cache.dtype)
        return
    blk, off = slots // block_size, slots % block_size
    for x, cache, sc in ((key, k_cache, k_scale), (value, v_cache, v_scale)):
        if sc is None:
            raise ValueError(f"a {cache.dtype} KV cache needs k_scale and v_scale")
        qx, sx = quantize(x, cache.dtype)
        cache[blk, off] = qx
        sc[blk, off] = sx


def _read(cache: torch.Tensor, scale, index, dtype: torch.dtype) -> torch.Tensor:
    """``cache[index]`` in ``dtype``, dequantized (``q * scale``) for a quantized cache."""
    if scale is None:
        return cache[index].to(dtype)
    return dequantize(cache[index], scale[index], dtype)


def paged_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    cu_seqlens_q: torch.Tensor,
    seq_lens: torch.Tensor,
    scale: float | None = None,
    k_scale: torch.Tensor | None = None,
    v_scale: torch.Tensor | None = None,
) -> torch.Tensor:
    """See :func:`local_engine.attention.paged_attention` (a quantized cache is dequantized to
    the compute dtype: float32 for half-precision or float32 queries, float64 for float64)."""
    num_tokens, num_heads, head_dim = q.shape
    block_size, num_kv_heads = k_cache.shape[1], k_cache.shape[2]
    if num_heads % num_kv_heads:
        raise ValueError(f"num_heads={num_heads} is not a multiple of num_kv_heads={num_kv_heads}")
    group = num_heads // num_kv_heads
    if scale is None:
        scale = head_dim**-0.5
    out = torch.empty_like(q)
    cu = cu_seqlens_q.tolist()
    lens = seq_lens.tolist()
    decode = [i for i in range(len(lens)) if cu[i + 1] - cu[i] == 1]
    if len(decode) > 1:
        _decode_batched(
            q, k_cache, v_cache, block_tables, cu, lens, decode, scale, out, k_scale, v_scale
        )
        done = set(decode)
    else:
        done = set()
    for i, ctx in enumerate(lens):
        start, end = cu[i], cu[i + 1]
        q_len = end - start
        if q_len == 0 or i in done:
            continue
        n_blocks = (ctx + block_size - 1) // block_size
        blocks = block_tables[i, :n_blocks].to(torch.long)
        compute = torch.float32 if q.dtype in (torch.float16, torch.bfloat16) else q.dtype
        # Gather the context through the block table: [ctx, KV, D] -> [1, H, ctx, D].
        k = _read(k_cache, k_scale, blocks, compute).flatten(0, 1)[:ctx]
        v = _read(v_cache, v_scale, blocks, compute).flatten(0, 1)[:ctx]
        k = (
            k[:, :, None, :]
            .expand(ctx, num_kv_heads, group, head_dim)
            .reshape(ctx, num_heads, head_dim)
        )
        v = (
            v[:, :, None, :]
            .expand(ctx, num_kv_heads, group, head_dim)
            .reshape(ctx, num_heads, head_dim)
        )
        qh = q[start:end].to(compute).transpose(0, 1).unsqueeze(0)
        kh = k.to(compute).transpose(0, 1).unsqueeze(0)
        vh = v.to(compute).transpose(0, 1).unsqueeze(0)
        mask = None
        if 1 < q_len < ctx:
            # Query j sits at position ctx - q_len + j and sees keys 0..that position.
            q_pos = torch.arange(ctx - q_len, ctx, device=q.device)[:, None]
            mask = torch.arange(ctx, device=q.device)[None, :] <= q_pos
        # q_len == ctx (nothing cached): the plain causal square; q_len == 1: sees everything.
        o = F.scaled_dot_product_attention(
            qh, kh, vh, attn_mask=mask, is_causal=(q_len == ctx and q_len > 1), scale=scale
        )
        out[start:end] = o[0].transpose(0, 1).to(q.dtype)
    return out


def _decode_batched(
    q, k_cache, v_cache, block_tables, cu, lens, decode, scale, out, k_scale=None, v_scale=None
) -> None:
    """All single-token (decode) sequences at once: gather their contexts padded to the longest,
    mask the padding, softmax in float32. Same arithmetic as the per-sequence path."""
    num_heads, head_dim = q.shape[1], q.shape[2]
    block_size, num_kv_heads = k_cache.shape[1], k_cache.shape[2]
    group = num_heads // num_kv_heads
    dev = q.device
    idx = torch.tensor(decode, dtype=torch.long, device=dev)
    rows = torch.tensor([cu[i] for i in decode], dtype=torch.long, device=dev)
    ctx = torch.tensor([lens[i] for i in decode], dtype=torch.long, device=dev)
    max_ctx = max(lens[i] for i in decode)
    n_blocks = (max_ctx + block_size - 1) // block_size
    blocks = block_tables[idx, :n_blocks].to(torch.long)  # [S, nb]
    # Entries past a sequence's own blocks are padding and may hold anything (the contract
    # ignores them): point them at block 0 so the gather stays in bounds; they are masked.
    own = (
        torch.arange(n_blocks, device=dev)[None, :]
        < ((ctx + block_size - 1) // block_size)[:, None]
    )
    blocks = torch.where(own, blocks, torch.zeros_like(blocks))
    s = len(decode)
    compute = torch.float32 if q.dtype in (torch.float16, torch.bfloat16) else q.dtype
    k = _read(k_cache, k_scale, blocks, compute).reshape(
        s, n_blocks * block_size, num_kv_heads, head_dim
    )
    v = _read(v_cache, v_scale, blocks, compute).reshape(
        s, n_blocks * block_size, num_kv_heads, head_dim
    )
    qd = q[rows].to(compute).view(s, num_kv_heads, group, head_dim)  # head h = kv * group + g
    scores = torch.einsum("skgd,stkd->skgt", qd, k) * scale
    pad = torch.arange(n_blocks * block_size, device=dev)[None, :] >= ctx[:, None]  # [S, T]
    scores.masked_fill_(pad[:, None, None, :], float("-inf"))
    v = v.masked_fill(pad[:, :, None, None], 0.0)  # stale slots may hold anything, even NaN
    probs = torch.softmax(scores.float(), dim=-1).to(compute)
    o = torch.einsum("skgt,stkd->skgd", probs, v).reshape(s, num_heads, head_dim)
    out[rows] = o.to(q.dtype)
