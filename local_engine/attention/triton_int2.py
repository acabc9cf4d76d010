"""Triton kernels of the 2-bit KV format (``kv_cache_dtype="int2"``; the layout and arithmetic
are :mod:`local_engine.kv_cache.int2`'s, which is their torch reference).

- ``_write_int2_kernel``: one program per token: a token whose block does not get all its
  ``block_size`` tokens in this call is stored in the model dtype into the block's residual
  slot (the slot id is the int32 in the block's first 4 bytes); the others are left to the
  second launch. A negative slot skips the token.
- ``_finalize_int2_kernel``: one program per token of the same call; the program of a token
  written at a block's last slot quantizes that block: its ``block_size`` keys and values
  (from the call's rows when all of them are in it, else from the residual slot) to 2-bit
  codes, keys per (KV head, channel) and values per (token, KV head), with float16 scales and
  minima. A second launch: the block's other tokens are written by other programs.
- :func:`int2_tile`: the attention kernel's loader, dequantizing one tile of keys and values
  in registers (finished blocks' 2-bit codes; the open block's residual slot read as stored).
"""

from __future__ import annotations

import triton
import triton.language as tl

from local_engine.kv_cache import int2

# kernels read module globals only as constexprs
CODE_MAX = tl.constexpr(int2.CODE_MAX)


@triton.jit
def _asym_codes(x, s, m):
    """2-bit codes of float32 ``x`` with float32 ``s`` (0 -> code 0) and ``m`` (broadcast)."""
    y = (x - m) / tl.where(s > 0, s, 1.0)
    return tl.minimum(tl.maximum(tl.floor(y + 0.5), 0.0), 3.0).to(tl.int32)


@triton.jit
def _whole_block(slot_ptr, t, slot, num_tokens, BLOCK_SIZE: tl.constexpr):
    """Whether token ``t``'s block gets all its tokens in this call (its first and last
    slots are written by rows ``t - off`` and ``t + BLOCK_SIZE - 1 - off``)."""
    off = slot % BLOCK_SIZE
    r0 = t - off
    r1 = r0 + BLOCK_SIZE - 1
    ok = (r0 >= 0) & (r1 < num_tokens)
    s0 = tl.load(slot_ptr + r0, mask=ok, other=-1).to(tl.int64)
    s1 = tl.load(slot_ptr + r1, mask=ok, other=-1).to(tl.int64)
    return ok & (s0 == slot - off) & (s1 == slot - off + BLOCK_SIZE - 1)


@triton.jit
def _residual_base(kc_ptr, blk, stride_kcb, elem):
    """The residual slot of open block ``blk`` as a pointer of ``elem``'s type (the slot id,
    a pseudo-block, is the int32 in the block's first 4 bytes)."""
    rid = tl.load((kc_ptr + blk * stride_kcb).to(tl.pointer_type(tl.int32))).to(tl.int64)
    return (kc_ptr + rid * stride_kcb).to(elem)


@triton.jit
def _write_int2_kernel(
    k_ptr,
    v_ptr,
    kc_ptr,
    slot_ptr,
    num_tokens,
    stride_kt,
    stride_kh,
    stride_vt,
    stride_vh,
    stride_kcb,
    BLOCK_SIZE: tl.constexpr,
    NUM_KV_HEADS: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    HEADS_PAD: tl.constexpr,
):
    t = tl.program_id(0).to(tl.int64)
    slot = tl.load(slot_ptr + t).to(tl.int64)
    if slot >= 0:
        if not _whole_block(slot_ptr, t, slot, num_tokens, BLOCK_SIZE):
            blk = slot // BLOCK_SIZE
            off = slot % BLOCK_SIZE
            res = _residual_base(kc_ptr, blk, stride_kcb, k_ptr.dtype)
            h = tl.arange(0, HEADS_PAD)
            d = tl.arange(0, HEAD_DIM)
            ok = (h < NUM_KV_HEADS)[:, None]
            row = off * NUM_KV_HEADS * HEAD_DIM + h[:, None] * HEAD_DIM + d[None, :]
            k = tl.load(k_ptr + t * stride_kt + h[:, None] * stride_kh + d[None, :], mask=ok)
            v = tl.load(v_ptr + t * stride_vt + h[:, None] * stride_vh + d[None, :], mask=ok)
            tl.store(res + row, k, mask=ok)
            tl.store(res + BLOCK_SIZE * NUM_KV_HEADS * HEAD_DIM + row, v, mask=ok)


@triton.jit
def _pack_codes(codes, BLOCK_SIZE: tl.constexpr, HEAD_DIM: tl.constexpr):
    """int32 codes ``[BLOCK_SIZE, HEAD_DIM]`` -> quarter-split bytes ``[BLOCK_SIZE, D/4]``
    (channel ``j + i * D/4`` in bits ``2i..2i+1`` of byte ``j``)."""
    d = tl.arange(0, HEAD_DIM)
    shifted = codes << ((d // (HEAD_DIM // 4)) * 2)[None, :]
    # disjoint bits: the sum is the OR
    return tl.sum(tl.reshape(shifted, (BLOCK_SIZE, 4, HEAD_DIM // 4)), 1).to(tl.uint8)


@triton.jit
def _finalize_int2_kernel(
    k_ptr,
    v_ptr,
    kc_ptr,
    km_ptr,
    vc_ptr,
    vp_ptr,
    slot_ptr,
    num_tokens,
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
    stride_pb,
    stride_pt,
    stride_ph,
    BLOCK_SIZE: tl.constexpr,
    NUM_KV_HEADS: tl.constexpr,
    HEAD_DIM: tl.constexpr,
):
    QUART: tl.constexpr = HEAD_DIM // 4
    t = tl.program_id(0).to(tl.int64)
    slot = tl.load(slot_ptr + t).to(tl.int64)
    if (slot >= 0) & (slot % BLOCK_SIZE == BLOCK_SIZE - 1):
        blk = slot // BLOCK_SIZE
        whole = _whole_block(slot_ptr, t, slot, num_tokens, BLOCK_SIZE)
        r = tl.arange(0, BLOCK_SIZE)
        d = tl.arange(0, HEAD_DIM)
        q4 = tl.arange(0, QUART)
        rows = t - (BLOCK_SIZE - 1) + r  # the call's rows of this block (when whole)
        res = _residual_base(kc_ptr, blk, stride_kcb, k_ptr.dtype)
        row_elems = NUM_KV_HEADS * HEAD_DIM
        for h in tl.static_range(NUM_KV_HEADS):
            if whole:
                kx = tl.load(k_ptr + rows[:, None] * stride_kt + h * stride_kh + d[None, :]).to(
                    tl.float32
                )
                vx = tl.load(v_ptr + rows[:, None] * stride_vt + h * stride_vh + d[None, :]).to(
                    tl.float32
                )
            else:
                ridx = r[:, None] * row_elems + h * HEAD_DIM + d[None, :]
                kx = tl.load(res + ridx).to(tl.float32)
                vx = tl.load(res + BLOCK_SIZE * row_elems + ridx).to(tl.float32)
            # keys per channel over the block's tokens
            mn = tl.min(kx, 0)
            s16 = ((tl.max(kx, 0) - mn) / CODE_MAX).to(tl.float16)
            m16 = mn.to(tl.float16)
            kq = _asym_codes(kx, s16.to(tl.float32)[None, :], m16.to(tl.float32)[None, :])
            # values per token over head_dim
            vmn = tl.min(vx, 1)
            vs16 = ((tl.max(vx, 1) - vmn) / CODE_MAX).to(tl.float16)
            vm16 = vmn.to(tl.float16)
            vq = _asym_codes(vx, vs16.to(tl.float32)[:, None], vm16.to(tl.float32)[:, None])
            kb = _pack_codes(kq, BLOCK_SIZE, HEAD_DIM)
            vb = _pack_codes(vq, BLOCK_SIZE, HEAD_DIM)
            tl.debug_barrier()  # every thread has read the slot id (byte 0..3) before stores
            kcp = kc_ptr + blk * stride_kcb + h * stride_kch
            tl.store(kcp + r[:, None] * stride_kct + q4[None, :], kb)
            vcp = vc_ptr + blk * stride_vcb + h * stride_vch
            tl.store(vcp + r[:, None] * stride_vct + q4[None, :], vb)
            mp = km_ptr + blk * (stride_kcb // 2) + h * 2 * HEAD_DIM
            tl.store(mp + d, s16)
            tl.store(mp + HEAD_DIM + d, m16)
            pp = vp_ptr + blk * stride_pb + r * stride_pt + h * stride_ph
            tl.store(pp, vs16)
            tl.store(pp + 1, vm16)


def write_kv_cache(key, value, k_cache, v_cache, slot_mapping, k_scale, v_scale) -> None:
    """See :func:`local_engine.attention.write_kv_cache` for an int2 cache (two launches;
    ``key``/``value`` in the dtype the residual slots hold).

    Raises:
        ValueError: shapes that disagree with the int2 views, or a missing scale view."""
    num_tokens, num_kv_heads, head_dim = key.shape
    want = (num_kv_heads, head_dim // 4)
    if tuple(k_cache.shape[2:]) != want or tuple(v_cache.shape[2:]) != want:
        raise ValueError(
            f"int2 caches must be [num_blocks, block_size, {num_kv_heads}, {head_dim // 4}]; got "
            f"{tuple(k_cache.shape)} and {tuple(v_cache.shape)}"
        )
    if k_scale is None or v_scale is None:
        raise ValueError("an int2 KV cache needs k_scale and v_scale")
    if slot_mapping.shape != (num_tokens,):
        raise ValueError(f"slot_mapping must be [{num_tokens}]; got {tuple(slot_mapping.shape)}")
    if num_tokens == 0:
        return
    if key.stride(2) != 1:
        key = key.contiguous()
    if value.stride(2) != 1:
        value = value.contiguous()
    bs = k_cache.shape[1]
    common = dict(BLOCK_SIZE=bs, NUM_KV_HEADS=num_kv_heads, HEAD_DIM=head_dim)
    _write_int2_kernel[(num_tokens,)](
        key,
        value,
        k_cache,
        slot_mapping,
        num_tokens,
        key.stride(0),
        key.stride(1),
        value.stride(0),
        value.stride(1),
        k_cache.stride(0),
        HEADS_PAD=triton.next_power_of_2(num_kv_heads),
        num_warps=1 if num_kv_heads * head_dim < 512 else 4,
        **common,
    )
    _finalize_int2_kernel[(num_tokens,)](
        key,
        value,
        k_cache,
        k_scale,
        v_cache,
        v_scale,
        slot_mapping,
        num_tokens,
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
        v_scale.stride(0),
        v_scale.stride(1),
        v_scale.stride(2),
        num_warps=4,
        **common,
    )


@triton.jit
def int2_tile(
    k_ptr,
    km_ptr,
    v_ptr,
    vp_ptr,
    q,
    blk,
    slot_in_blk,
    n,
    n_ok,
    ctx,
    kvh,
    stride_kb,
    stride_kt,
    stride_vb,
    stride_vt,
    stride_pb,
    stride_pt,
    stride_ph,
    pool_blocks,
    offs_d,
    HEAD_DIM: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
    OPEN: tl.constexpr,
):
    """One tile of keys ``n`` (``[TILE_N]``; block ``blk``, offset ``slot_in_blk``; ``n_ok``
    the loadable ones): returns keys float32 ``[HEAD_DIM, TILE_N]`` and values float32
    ``[TILE_N, HEAD_DIM]`` (0 where not ``n_ok``): a finished block's dequantized (``code *
    scale + minimum``), with ``OPEN`` (tiles that may hold the context's open block) the open
    block's from its residual slot, stored in ``q``'s dtype. A slot id read from a block that
    is not open (a CUDA graph's padding: context 1 over block 0) is clamped into the pool
    (``pool_blocks`` blocks, pseudo-blocks included): garbage values, no stray access."""
    QUART: tl.constexpr = HEAD_DIM // 4
    finished = (n // BLOCK_SIZE + 1) * BLOCK_SIZE <= ctx
    if OPEN:
        fin_ok = n_ok & finished
    else:
        fin_ok = n_ok
    k_off = blk * stride_kb + slot_in_blk * stride_kt + kvh * QUART  # [TILE_N] bytes
    kb = tl.load(
        k_ptr + k_off[None, :] + (offs_d % QUART)[:, None], mask=fin_ok[None, :], other=0
    ).to(tl.int32)
    codes = (kb >> ((offs_d // QUART) * 2)[:, None]) & 3
    # per-channel scale (row 0) and minimum (row 1) of each key's block, float16
    m_idx = (blk * (stride_kb // 2) + kvh * 2 * HEAD_DIM)[None, :] + offs_d[:, None]
    sc = tl.load(km_ptr + m_idx, mask=fin_ok[None, :], other=0.0).to(tl.float32)
    mn = tl.load(km_ptr + m_idx + HEAD_DIM, mask=fin_ok[None, :], other=0.0).to(tl.float32)
    k = codes.to(tl.float32) * sc + mn
    v_off = blk * stride_vb + slot_in_blk * stride_vt + kvh * QUART
    vb = tl.load(
        v_ptr + v_off[:, None] + (offs_d % QUART)[None, :], mask=fin_ok[:, None], other=0
    ).to(tl.int32)
    vcode = (vb >> ((offs_d // QUART) * 2)[None, :]) & 3
    p_off = blk * stride_pb + slot_in_blk * stride_pt + kvh * stride_ph
    v_s = tl.load(vp_ptr + p_off, mask=fin_ok, other=0.0).to(tl.float32)
    v_m = tl.load(vp_ptr + p_off + 1, mask=fin_ok, other=0.0).to(tl.float32)
    v = vcode.to(tl.float32) * v_s[:, None] + v_m[:, None]
    if OPEN:
        open_ok = n_ok & (finished == 0)
        ids = tl.load(
            (k_ptr + blk * stride_kb).to(tl.pointer_type(tl.int32)), mask=open_ok, other=0
        ).to(tl.int64)
        elem_bytes: tl.constexpr = q.dtype.primitive_bitwidth // 8
        per_slot = (2 * BLOCK_SIZE * 4 * stride_kt * elem_bytes + stride_kb - 1) // stride_kb
        ids = tl.minimum(tl.maximum(ids, 0), pool_blocks - per_slot)
        res = (k_ptr + ids * stride_kb).to(tl.pointer_type(q.dtype))  # [TILE_N] slot bases
        row = 4 * stride_kt  # residual elements per token: kv_heads * head_dim
        r_off = slot_in_blk * row + kvh * HEAD_DIM
        rk = tl.load(
            res[None, :] + r_off[None, :] + offs_d[:, None], mask=open_ok[None, :], other=0.0
        ).to(tl.float32)
        rv = tl.load(
            res[:, None] + BLOCK_SIZE * row + r_off[:, None] + offs_d[None, :],
            mask=open_ok[:, None],
            other=0.0,
        ).to(tl.float32)
        k = tl.where(finished[None, :], k, rk)
        v = tl.where(finished[:, None], v, rv)
    v = tl.where(n_ok[:, None], v, 0.0)
    return k, v


__all__ = ["write_kv_cache", "int2_tile"]
