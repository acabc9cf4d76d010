"""Reference paged attention in plain torch (any device, any float dtype).

For each sequence it gathers the context's K/V through the block table and runs
``torch.nn.functional.scaled_dot_product_attention`` (float32 for half-precision inputs) with
``enable_gqa`` (query head ``h`` reads KV head ``h // group``; K/V are never copied to all
query heads): causal for a prompt with nothing cached, an explicit offset-causal mask for new
tokens over a cached prefix. Several single-token (decode) sequences go through one padded,
masked einsum. It is the oracle the Triton kernels are tested against and the engine's CPU
path, so it stays plain torch; what makes it fast enough for the CPU engine is doing little
per layer: one sequence owning every row (batch-1 decode, a single prefill) skips the
per-sequence loop, the gather is one ``index_select`` per cache, and the GQA expansion
(``bench/RESULTS.md`` "## cpu": 225 -> 66 us per layer at 230 tokens of context) is gone.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from local_engine.kv_cache import int2
from local_engine.kv_cache.quant import (
    PACKED_DTYPE,
    dequantize,
    is_quantized,
    packed_bits,
    quantize,
    rotate_int4,
)

# The last slot mapping seen, as int64 with its padding mask: every layer of a forward pass
# writes through the same one, so the conversion and the padding check (a host sync on a GPU)
# run once per step. Keyed by identity and version counter (an in-place torch write
# invalidates it; an inference-mode tensor has none and is never reused); the memo holds the
# tensor, so a later step's cannot reuse its id.
_SLOTS: tuple | None = None


def version_of(t: torch.Tensor) -> int | None:
    """``t``'s version counter (bumped by every in-place write), None for an inference-mode
    tensor, which has none (a memo keyed on it must not be reused)."""
    return None if t.is_inference() else t._version


def _slots(slot_mapping: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``(slots as int64, mask of the non-negative ones or None when all are)``."""
    global _SLOTS
    memo = _SLOTS
    version = version_of(slot_mapping)
    if memo is not None and memo[0] is slot_mapping and version is not None and memo[1] == version:
        return memo[2], memo[3]
    slots = slot_mapping if slot_mapping.dtype == torch.long else slot_mapping.to(torch.long)
    keep = None
    if slots.numel() and int(slots.min()) < 0:
        keep = slots >= 0
    _SLOTS = (slot_mapping, version, slots, keep)
    return slots, keep


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
    slots, keep = _slots(slot_mapping)
    if keep is not None:  # padding rows are skipped
        slots, key, value = slots[keep], key[keep], value[keep]
    if not is_quantized(k_cache):
        # index_copy_ on the flat slot axis: one kernel per cache, no index_put bookkeeping
        if key.dtype != k_cache.dtype:
            key, value = key.to(k_cache.dtype), value.to(v_cache.dtype)
        k_cache.view(num_blocks * block_size, *k_cache.shape[2:]).index_copy_(0, slots, key)
        v_cache.view(num_blocks * block_size, *v_cache.shape[2:]).index_copy_(0, slots, value)
        return
    if int2.is_int2(k_cache, k_scale):  # KIVI 2-bit: residual slots, quantized on fill
        if v_scale is None:
            raise ValueError("an int2 KV cache needs k_scale and v_scale")
        int2.write(key, value, k_cache, v_cache, k_scale, v_scale, slots)
        return
    blk, off = slots // block_size, slots % block_size
    bits = packed_bits(k_cache, key.shape[-1])
    if k_cache.dtype == PACKED_DTYPE:  # INT4 keys are stored rotated (kv_cache.quant)
        key = rotate_int4(key)
    for x, cache, sc in ((key, k_cache, k_scale), (value, v_cache, v_scale)):
        if sc is None:
            raise ValueError(f"a {cache.dtype} KV cache needs k_scale and v_scale")
        qx, sx = quantize(x, cache.dtype, bits)
        cache[blk, off] = qx
        sc[blk, off] = sx


def _read(cache: torch.Tensor, scale, index, dtype: torch.dtype) -> torch.Tensor:
    """``cache[index]`` (``index`` int32/int64 blocks) in ``dtype``, dequantized
    (``q * scale``) for a quantized cache; ``index`` of any shape, gathered along the block
    axis (``index_select`` on the flattened index, a plain copy kernel)."""
    flat = index.reshape(-1)
    x = cache.index_select(0, flat)
    if scale is not None:  # (a packed cache's last dimension unpacks to head_dim)
        x = dequantize(x, scale.index_select(0, flat), dtype)
    return x.to(dtype).view(*index.shape, *cache.shape[1:-1], x.shape[-1])


def _compute_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


def _attend(q, k_cache, v_cache, table_row, ctx, scale, k_scale, v_scale) -> torch.Tensor:
    """One sequence: ``q`` ``[q_len, H, D]`` (its new tokens, the last ``q_len`` positions of
    a ``ctx``-token context) over the context gathered through ``table_row``; returns
    ``[q_len, H, D]`` in the compute dtype (a view).

    Grouped-query attention without expanding K/V to all query heads: SDPA's ``enable_gqa``
    maps query head ``h`` to KV head ``h // group``, the layout of ``_decode_batched``."""
    q_len, num_heads, head_dim = q.shape
    block_size, num_kv_heads = k_cache.shape[1], k_cache.shape[2]
    compute = _compute_dtype(q.dtype)
    n_blocks = (ctx + block_size - 1) // block_size
    blocks = table_row[:n_blocks]
    # [n_blocks, block, KV, D] -> [ctx, KV, D] -> [1, KV, ctx, D] (a strided view)
    if k_scale is None and k_cache.dtype == compute:  # the CPU engine's case: fewest calls
        k = k_cache.index_select(0, blocks).view(n_blocks * block_size, num_kv_heads, head_dim)
        v = v_cache.index_select(0, blocks).view(n_blocks * block_size, num_kv_heads, head_dim)
    elif int2.is_int2(k_cache, k_scale):  # block i is finished when (i + 1) * bs <= ctx
        finished = (torch.arange(n_blocks, device=q.device) + 1) * block_size <= ctx
        k, v = int2.read_blocks(k_cache, v_cache, k_scale, v_scale, blocks, finished, q.dtype)
        k, v = k.to(compute), v.to(compute)
        k = k.view(-1, num_kv_heads, head_dim)
        v = v.view(-1, num_kv_heads, head_dim)
    else:
        k = _read(k_cache, k_scale, blocks, compute).view(-1, num_kv_heads, head_dim)
        v = _read(v_cache, v_scale, blocks, compute).view(-1, num_kv_heads, head_dim)
    kh = k[:ctx].transpose(0, 1).unsqueeze(0)
    vh = v[:ctx].transpose(0, 1).unsqueeze(0)
    if q.dtype != compute:
        q = q.to(compute)
    qh = q.transpose(0, 1).unsqueeze(0)  # [1, H, q_len, D]
    mask = None
    if 1 < q_len < ctx:
        # Query j sits at position ctx - q_len + j and sees keys 0..that position.
        q_pos = torch.arange(ctx - q_len, ctx, device=q.device)[:, None]
        mask = torch.arange(ctx, device=q.device)[None, :] <= q_pos
    # q_len == ctx (nothing cached): the plain causal square; q_len == 1: sees everything.
    o = F.scaled_dot_product_attention(
        qh,
        kh,
        vh,
        attn_mask=mask,
        is_causal=(q_len == ctx and q_len > 1),
        scale=scale,
        enable_gqa=num_heads != num_kv_heads,
    )
    return o.view(num_heads, head_dim)[None] if q_len == 1 else o[0].transpose(0, 1)


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
    num_kv_heads = k_cache.shape[2]
    if num_heads % num_kv_heads:
        raise ValueError(f"num_heads={num_heads} is not a multiple of num_kv_heads={num_kv_heads}")
    if scale is None:
        scale = head_dim**-0.5
    if k_cache.dtype == PACKED_DTYPE and not int2.is_int2(k_cache, k_scale):
        # INT4 keys are rotated: rotate the queries alike
        q = rotate_int4(q)
    cu = cu_seqlens_q.tolist()
    lens = seq_lens.tolist()
    if len(lens) == 1 and cu[0] == 0 and cu[1] == num_tokens:
        # one sequence owning every row (batch-1 decode, a prefill): no per-sequence loop
        if num_tokens == 0:
            return torch.empty_like(q)
        o = _attend(q, k_cache, v_cache, block_tables[0], lens[0], scale, k_scale, v_scale)
        return o if o.dtype == q.dtype and num_tokens == 1 else o.to(q.dtype).contiguous()
    out = torch.empty_like(q)
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
        if end == start or i in done:
            continue
        out[start:end] = _attend(
            q[start:end], k_cache, v_cache, block_tables[i], ctx, scale, k_scale, v_scale
        )
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
    if int2.is_int2(k_cache, k_scale):
        finished = (torch.arange(n_blocks, device=dev)[None, :] + 1) * block_size <= ctx[:, None]
        finished |= ~own  # padding entries (block 0): read as 2-bit, masked below
        k, v = int2.read_blocks(k_cache, v_cache, k_scale, v_scale, blocks, finished, q.dtype)
        k, v = k.to(compute), v.to(compute)
    else:
        k = _read(k_cache, k_scale, blocks, compute)
        v = _read(v_cache, v_scale, blocks, compute)
    k = k.reshape(s, n_blocks * block_size, num_kv_heads, head_dim)
    v = v.reshape(s, n_blocks * block_size, num_kv_heads, head_dim)
    qd = q[rows].to(compute).view(s, num_kv_heads, group, head_dim)  # head h = kv * group + g
    scores = torch.einsum("skgd,stkd->skgt", qd, k) * scale
    pad = torch.arange(n_blocks * block_size, device=dev)[None, :] >= ctx[:, None]  # [S, T]
    scores.masked_fill_(pad[:, None, None, :], float("-inf"))
    v = v.masked_fill(pad[:, :, None, None], 0.0)  # stale slots may hold anything, even NaN
    probs = torch.softmax(scores.float(), dim=-1).to(compute)
    o = torch.einsum("skgt,stkd->skgd", probs, v).reshape(s, num_heads, head_dim)
    out[rows] = o.to(q.dtype)
