"""Triton kernels of the 2-bit KV format (``kv_cache_dtype="int2"``; the layout and arithmetic
are :mod:`local_engine.kv_cache.int2`'s, which is their torch reference).

- ``_write_int2_kernel``: one program per token: its keys (already multiplied by the Hadamard
  matrix ``H``, in torch) as INT4 residual rows with float32 ``amax / 7`` scales, its values as
  2-bit codes with float16 scale and minimum per KV head, at ``slot_mapping[t]`` (a negative
  slot skips the token).
- ``_finalize_int2_kernel``: one program per token of the same call; the program of a token
  written at a block's last slot re-quantizes that block's keys: INT4 rows dequantized and
  rotated back (``x' H`` as one ``tl.dot`` per KV head), per-channel min/max over the
  ``block_size`` tokens, 2-bit codes over the rows' first ``D/4`` bytes and the float16 scales
  and minima over rows 0-15's other ``D/4``. A second launch: the block's other tokens may be
  written by other programs of the write.
- :func:`int2_tile`: the attention kernel's loader, dequantizing one tile of keys and values
  in registers (finished blocks' 2-bit keys, the open block's INT4 keys read against the
  rotated queries, 2-bit values).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from local_engine.kv_cache import int2
from local_engine.kv_cache.quant import hadamard, rotate_int4

# kernels read module globals only as constexprs
CODE_MAX = tl.constexpr(int2.CODE_MAX)
META_ROWS = tl.constexpr(int2.META_ROWS)
RESIDUAL_QMAX = tl.constexpr(int2.RESIDUAL_QMAX)


@triton.jit
def _asym_codes(x, s, m):
    """2-bit codes of float32 ``x`` with float32 ``s`` (0 -> code 0) and ``m`` (broadcast)."""
    y = (x - m) / tl.where(s > 0, s, 1.0)
    return tl.minimum(tl.maximum(tl.floor(y + 0.5), 0.0), 3.0).to(tl.int32)


@triton.jit
def _write_int2_kernel(
    k_ptr,
    v_ptr,
    kc_ptr,
    vc_ptr,
    ks_ptr,
    vs16_ptr,
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
    stride_sb,
    stride_st,
    stride_sh,
    BLOCK_SIZE: tl.constexpr,
    NUM_KV_HEADS: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    HEADS_PAD: tl.constexpr,
):
    HALF: tl.constexpr = HEAD_DIM // 2
    QUART: tl.constexpr = HEAD_DIM // 4
    t = tl.program_id(0).to(tl.int64)
    slot = tl.load(slot_ptr + t).to(tl.int64)
    if slot >= 0:
        blk = slot // BLOCK_SIZE
        off = slot % BLOCK_SIZE
        h = tl.arange(0, HEADS_PAD)
        h_ok = h < NUM_KV_HEADS
        # keys: INT4 of the rotated key, split-half nibbles (the "int4" format's arithmetic)
        j = tl.arange(0, HALF)
        kp = k_ptr + t * stride_kt + h[:, None] * stride_kh + j[None, :]
        k1 = tl.load(kp, mask=h_ok[:, None], other=0.0).to(tl.float32)
        k2 = tl.load(kp + HALF, mask=h_ok[:, None], other=0.0).to(tl.float32)
        sk = tl.maximum(tl.max(tl.abs(k1), 1), tl.max(tl.abs(k2), 1)) / RESIDUAL_QMAX
        inv = tl.where(sk > 0, sk, 1.0)[:, None]
        c1 = tl.floor(tl.minimum(tl.maximum(k1 / inv, -RESIDUAL_QMAX), RESIDUAL_QMAX) + 0.5)
        c2 = tl.floor(tl.minimum(tl.maximum(k2 / inv, -RESIDUAL_QMAX), RESIDUAL_QMAX) + 0.5)
        kb = (c1.to(tl.int32) + 8) | ((c2.to(tl.int32) + 8) << 4)
        kc = kc_ptr + blk * stride_kcb + off * stride_kct + h[:, None] * stride_kch + j[None, :]
        tl.store(kc, kb.to(tl.uint8), mask=h_ok[:, None])
        s_off = blk * stride_sb + off * stride_st + h * stride_sh
        tl.store(ks_ptr + s_off, sk, mask=h_ok)
        # values: 2-bit asymmetric per token-head, quarter-split codes
        q = tl.arange(0, QUART)
        vp = v_ptr + t * stride_vt + h[:, None] * stride_vh + q[None, :]
        v0 = tl.load(vp, mask=h_ok[:, None], other=0.0).to(tl.float32)
        v1 = tl.load(vp + QUART, mask=h_ok[:, None], other=0.0).to(tl.float32)
        v2 = tl.load(vp + 2 * QUART, mask=h_ok[:, None], other=0.0).to(tl.float32)
        v3 = tl.load(vp + 3 * QUART, mask=h_ok[:, None], other=0.0).to(tl.float32)
        mn = tl.minimum(
            tl.minimum(tl.min(v0, 1), tl.min(v1, 1)), tl.minimum(tl.min(v2, 1), tl.min(v3, 1))
        )
        mx = tl.maximum(
            tl.maximum(tl.max(v0, 1), tl.max(v1, 1)), tl.maximum(tl.max(v2, 1), tl.max(v3, 1))
        )
        s16 = ((mx - mn) / CODE_MAX).to(tl.float16)
        m16 = mn.to(tl.float16)
        s = s16.to(tl.float32)[:, None]
        m = m16.to(tl.float32)[:, None]
        vb = (
            _asym_codes(v0, s, m)
            | (_asym_codes(v1, s, m) << 2)
            | (_asym_codes(v2, s, m) << 4)
            | (_asym_codes(v3, s, m) << 6)
        )
        vc = vc_ptr + blk * stride_vcb + off * stride_vct + h[:, None] * stride_vch + q[None, :]
        tl.store(vc, vb.to(tl.uint8), mask=h_ok[:, None])
        tl.store(vs16_ptr + 2 * s_off, s16, mask=h_ok)
        tl.store(vs16_ptr + 2 * s_off + 1, m16, mask=h_ok)


@triton.jit
def _finalize_int2_kernel(
    kc_ptr,
    km_ptr,
    ks_ptr,
    h_ptr,
    slot_ptr,
    stride_kcb,
    stride_kct,
    stride_kch,
    stride_sb,
    stride_st,
    stride_sh,
    BLOCK_SIZE: tl.constexpr,
    NUM_KV_HEADS: tl.constexpr,
    HEAD_DIM: tl.constexpr,
):
    HALF: tl.constexpr = HEAD_DIM // 2
    QUART: tl.constexpr = HEAD_DIM // 4
    EIGHTH: tl.constexpr = HEAD_DIM // 8
    t = tl.program_id(0).to(tl.int64)
    slot = tl.load(slot_ptr + t).to(tl.int64)
    if (slot >= 0) & (slot % BLOCK_SIZE == BLOCK_SIZE - 1):
        blk = slot // BLOCK_SIZE
        r = tl.arange(0, BLOCK_SIZE)
        d = tl.arange(0, HEAD_DIM)
        hd = tl.load(h_ptr + d[:, None] * HEAD_DIM + d[None, :])  # H [D, D] float32
        q4 = tl.arange(0, QUART)
        for h in tl.static_range(NUM_KV_HEADS):
            base = kc_ptr + blk * stride_kcb + h * stride_kch
            # INT4 rows [bs, D]: channel c in byte c mod D/2, high nibble for c >= D/2
            b = tl.load(base + r[:, None] * stride_kct + (d % HALF)[None, :]).to(tl.int32)
            b = tl.where((d >= HALF)[None, :], b >> 4, b) & 15
            sc = tl.load(ks_ptr + blk * stride_sb + r * stride_st + h * stride_sh)
            kr = (b - 8).to(tl.float32) * sc[:, None]
            k = tl.dot(kr, hd, input_precision="ieee")  # rotated back: [bs, D]
            mn = tl.min(k, 0)
            mx = tl.max(k, 0)
            s16 = ((mx - mn) / CODE_MAX).to(tl.float16)
            m16 = mn.to(tl.float16)
            codes = _asym_codes(k, s16.to(tl.float32)[None, :], m16.to(tl.float32)[None, :])
            # quarter-split bytes: channel j + i * D/4 in bits 2i..2i+1 of byte j
            sh = (d // QUART) * 2
            shifted = codes << sh[None, :]
            byte = tl.sum(
                tl.reshape(shifted, (BLOCK_SIZE, 4, QUART)), 1
            )  # disjoint bits: the sum is the OR
            tl.store(base + r[:, None] * stride_kct + q4[None, :], byte.to(tl.uint8))
            # scales then minima: entry i at row i // (D/8), float16 column D/8 + i % (D/8)
            mbase = km_ptr + (blk * stride_kcb + h * stride_kch) // 2
            row = d // EIGHTH
            col = EIGHTH + d % EIGHTH
            tl.store(mbase + row * (stride_kct // 2) + col, s16)
            tl.store(mbase + (row + META_ROWS // 2) * (stride_kct // 2) + col, m16)


def write_kv_cache(key, value, k_cache, v_cache, slot_mapping, k_scale, v_scale) -> None:
    """See :func:`local_engine.attention.write_kv_cache` for an int2 cache (two launches).

    Raises:
        ValueError: shapes that disagree with the int2 views, or a missing scale view."""
    num_tokens, num_kv_heads, head_dim = key.shape
    want_k = (num_kv_heads, head_dim // 2)
    if tuple(k_cache.shape[2:]) != want_k or tuple(v_cache.shape[2:]) != (
        num_kv_heads,
        head_dim // 4,
    ):
        raise ValueError(
            f"int2 caches must be [num_blocks, block_size, {num_kv_heads}, {head_dim // 2}] and "
            f"[..., {head_dim // 4}]; got {tuple(k_cache.shape)} and {tuple(v_cache.shape)}"
        )
    if k_scale is None or v_scale is None:
        raise ValueError("an int2 KV cache needs k_scale and v_scale")
    if slot_mapping.shape != (num_tokens,):
        raise ValueError(f"slot_mapping must be [{num_tokens}]; got {tuple(slot_mapping.shape)}")
    if num_tokens == 0:
        return
    key = rotate_int4(key)  # the residual keys are stored rotated (kv_cache.int2)
    if value.stride(2) != 1:
        value = value.contiguous()
    bs = k_cache.shape[1]
    vs16 = v_scale.view(torch.float16)
    _write_int2_kernel[(num_tokens,)](
        key,
        value,
        k_cache,
        v_cache,
        k_scale,
        vs16,
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
        k_scale.stride(0),
        k_scale.stride(1),
        k_scale.stride(2),
        BLOCK_SIZE=bs,
        NUM_KV_HEADS=num_kv_heads,
        HEAD_DIM=head_dim,
        HEADS_PAD=triton.next_power_of_2(num_kv_heads),
        num_warps=1 if num_kv_heads * head_dim < 512 else 4,
    )
    _finalize_int2_kernel[(num_tokens,)](
        k_cache,
        k_cache.view(torch.float16),
        k_scale,
        hadamard(head_dim, torch.float32, key.device),
        slot_mapping,
        k_cache.stride(0),
        k_cache.stride(1),
        k_cache.stride(2),
        k_scale.stride(0),
        k_scale.stride(1),
        k_scale.stride(2),
        BLOCK_SIZE=bs,
        NUM_KV_HEADS=num_kv_heads,
        HEAD_DIM=head_dim,
        num_warps=4,
    )


@triton.jit
def int2_tile(
    k_ptr,
    km_ptr,
    v_ptr,
    ks_ptr,
    vs16_ptr,
    blk,
    slot_in_blk,
    n,
    n_ok,
    ctx,
    kv_head_off_k,
    kv_head_off_v,
    kvh,
    stride_kb,
    stride_kt,
    stride_vb,
    stride_vt,
    stride_sb,
    stride_st,
    stride_sh,
    offs_d,
    HEAD_DIM: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
    TILE_N: tl.constexpr,
    MASKED: tl.constexpr,
):
    """One tile of ``TILE_N`` keys ``n`` (block ``blk``, offset ``slot_in_blk``; ``n_ok``
    the loadable ones): returns ``(k_fin, k_open, finished, v)``: the keys of finished blocks
    float32 ``[HEAD_DIM, TILE_N]`` (``code * scale_c + min_c``), the open block's INT4 keys
    in the rotated space where the tile may hold it (``MASKED``, or tiles shorter than a
    block; else ``k_fin`` again), the per-key bool ``finished``, and the values float32
    ``[TILE_N, HEAD_DIM]`` (0 where not ``n_ok``)."""
    QUART: tl.constexpr = HEAD_DIM // 4
    HALF: tl.constexpr = HEAD_DIM // 2
    EIGHTH: tl.constexpr = HEAD_DIM // 8
    k_off = blk * stride_kb + slot_in_blk * stride_kt + kv_head_off_k  # [TILE_N] bytes
    kb = tl.load(
        k_ptr + k_off[None, :] + (offs_d % QUART)[:, None], mask=n_ok[None, :], other=0
    ).to(tl.int32)
    codes = (kb >> ((offs_d // QUART) * 2)[:, None]) & 3
    # per-channel scale/minimum of each key's block (rows 0-15 of its K area, float16)
    m_base = (blk * stride_kb + kv_head_off_k) // 2
    row = offs_d // EIGHTH
    col = EIGHTH + offs_d % EIGHTH
    m_idx = m_base[None, :] + (row * (stride_kt // 2) + col)[:, None]
    finished = (n // BLOCK_SIZE + 1) * BLOCK_SIZE <= ctx
    # an open block's bytes there are INT4 rows, not float16: not loaded (0)
    m_ok = (n_ok & finished)[None, :]
    sc = tl.load(km_ptr + m_idx, mask=m_ok, other=0.0).to(tl.float32)
    mn = tl.load(km_ptr + m_idx + (META_ROWS // 2) * (stride_kt // 2), mask=m_ok, other=0.0)
    k_fin = codes.to(tl.float32) * sc + mn.to(tl.float32)
    s_off = blk * stride_sb + slot_in_blk * stride_st + kvh * stride_sh
    if MASKED or TILE_N < BLOCK_SIZE:
        b4 = tl.load(
            k_ptr + k_off[None, :] + (offs_d % HALF)[:, None], mask=n_ok[None, :], other=0
        ).to(tl.int32)
        b4 = tl.where((offs_d >= HALF)[:, None], b4 >> 4, b4) & 15
        k_sc = tl.load(ks_ptr + s_off, mask=n_ok, other=0.0)
        k_open = (b4 - 8).to(tl.float32) * k_sc[None, :]
    else:
        k_open = k_fin
    v_off = blk * stride_vb + slot_in_blk * stride_vt + kv_head_off_v
    vb = tl.load(
        v_ptr + v_off[:, None] + (offs_d % QUART)[None, :], mask=n_ok[:, None], other=0
    ).to(tl.int32)
    vcode = (vb >> ((offs_d // QUART) * 2)[None, :]) & 3
    v_s = tl.load(vs16_ptr + 2 * s_off, mask=n_ok, other=0.0).to(tl.float32)
    v_m = tl.load(vs16_ptr + 2 * s_off + 1, mask=n_ok, other=0.0).to(tl.float32)
    v = vcode.to(tl.float32) * v_s[:, None] + v_m[:, None]
    v = tl.where(n_ok[:, None], v, 0.0)
    return k_fin, k_open, finished, v


__all__ = ["write_kv_cache", "int2_tile"]
