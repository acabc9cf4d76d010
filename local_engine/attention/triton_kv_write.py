"""Triton kernel: write new tokens' K/V into the paged cache through the slot mapping.

One program per token copies that token's ``[num_kv_heads, head_dim]`` rows of K and V to flat
slot ``slot_mapping[t] = block * block_size + offset`` of the caches; a negative slot skips the
token (padding). One launch per layer. A quantized cache (``QUANT`` 1 = INT8, 2 = FP8 E4M3,
3 = packed INT4, split-half nibbles: :mod:`local_engine.kv_cache.quant`)
gets each token-head quantized in registers with its own float32 scale
(:func:`quantize_heads`, the arithmetic of :func:`local_engine.kv_cache.quant.quantize`), the
scale stored at the same (block, offset, head) of the scale view.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from local_engine.kv_cache.quant import PACKED_DTYPE, PACKED_QMAX, QMAX, rotate_int4


def quant_mode(cache: torch.Tensor) -> int:
    """0 for a float cache, 1 for INT8, 2 for FP8 E4M3, 3 for packed INT4 (the kernels'
    ``QUANT``)."""
    if cache.dtype == torch.int8:
        return 1
    if cache.dtype == PACKED_DTYPE:
        return 3
    if cache.dtype in QMAX:
        return 2
    return 0


def qmax_of(cache: torch.Tensor) -> float:
    """The kernels' ``QMAX_`` for a cache view (1.0 for a float cache, unused)."""
    if cache.dtype == PACKED_DTYPE:
        return PACKED_QMAX[4]
    return QMAX.get(cache.dtype, 1.0)


@triton.jit
def int4_codes(y, scale, QMAX_: tl.constexpr):
    """``y`` float32 ``[R, C]`` / ``scale`` ``[R]``, rounded (``floor(. + 0.5)``), clamped to
    [-QMAX_, QMAX_], plus 8: the 4-bit codes as int32."""
    y = y / tl.where(scale > 0, scale, 1.0)[:, None]
    y = tl.floor(tl.minimum(tl.maximum(y, -QMAX_), QMAX_) + 0.5)
    return y.to(tl.int32) + 8


@triton.jit
def unpack_int4_tile(b, hi):
    """Packed bytes ``b`` (uint8 tile) -> the INT4 values as float32: the high nibble where
    ``hi`` (broadcast) is set, else the low one, minus 8."""
    x = b.to(tl.int32)
    x = tl.where(hi, x >> 4, x) & 15
    return (x - 8).to(tl.float32)


@triton.jit
def quantize_rows(y, scale, QUANT: tl.constexpr, QMAX_: tl.constexpr, out_ty: tl.constexpr):
    """``y`` float32 ``[R, C]`` divided by ``scale`` ``[R]`` (0 = an all-zero row), clamped to
    ``[-QMAX_, QMAX_]``, INT8-rounded (``floor(. + 0.5)``) or cast to FP8, as ``out_ty``."""
    y = y / tl.where(scale > 0, scale, 1.0)[:, None]
    y = tl.minimum(tl.maximum(y, -QMAX_), QMAX_)
    if QUANT == 1:
        y = tl.floor(y + 0.5)
    else:
        # round to E4M3's 4 significant bits first (Veltkamp split, float32 round-to-nearest),
        # so the cast below is exact: the Triton interpreter's float8e4nv cast (3.9) rounds
        # e.g. -127.9 to -64 (a lost exponent carry); on the GPU this changes nothing
        c = y * 1048577.0  # 2**20 + 1: keeps 24 - 20 = 4 bits
        y = c - (c - y)
    return y.to(out_ty)


@triton.jit
def quantize_heads(x, QUANT: tl.constexpr, QMAX_: tl.constexpr, out_ty: tl.constexpr):
    """Per-row (token-head) quantization of float32 ``x`` ``[R, C]`` (padding zeros): returns
    ``(q, scale)``, ``scale = amax(|x|, row) / QMAX_``."""
    scale = tl.max(tl.abs(x), 1) / QMAX_
    return quantize_rows(x, scale, QUANT, QMAX_, out_ty), scale


@triton.jit
def _write_int4(
    k_ptr,
    v_ptr,
    kc_ptr,
    vc_ptr,
    ks_ptr,
    vs_ptr,
    stride_kh,
    stride_vh,
    stride_kch,
    stride_vch,
    stride_vcd,
    stride_sh,
    QMAX_: tl.constexpr,
    NUM_KV_HEADS: tl.constexpr,
    HALF: tl.constexpr,
    HEADS_PAD: tl.constexpr,
    HALF_PAD: tl.constexpr,
):
    """One token's K and V ``[heads, 2 * HALF]`` (at ``k_ptr``/``v_ptr``) as packed INT4 at
    its slot (``kc_ptr``/``vc_ptr``: the slot's first byte) with per-head scales."""
    h = tl.arange(0, HEADS_PAD)
    j = tl.arange(0, HALF_PAD)
    mask = (h < NUM_KV_HEADS)[:, None] & (j < HALF)[None, :]
    kp = k_ptr + h[:, None] * stride_kh + j[None, :]
    vp = v_ptr + h[:, None] * stride_vh + j[None, :]
    k1 = tl.load(kp, mask=mask, other=0.0).to(tl.float32)
    k2 = tl.load(kp + HALF, mask=mask, other=0.0).to(tl.float32)
    v1 = tl.load(vp, mask=mask, other=0.0).to(tl.float32)
    v2 = tl.load(vp + HALF, mask=mask, other=0.0).to(tl.float32)
    sk = tl.maximum(tl.max(tl.abs(k1), 1), tl.max(tl.abs(k2), 1)) / QMAX_
    sv = tl.maximum(tl.max(tl.abs(v1), 1), tl.max(tl.abs(v2), 1)) / QMAX_
    kb = int4_codes(k1, sk, QMAX_) | (int4_codes(k2, sk, QMAX_) << 4)
    vb = int4_codes(v1, sv, QMAX_) | (int4_codes(v2, sv, QMAX_) << 4)
    tl.store(kc_ptr + h[:, None] * stride_kch + j[None, :], kb.to(tl.uint8), mask=mask)
    tl.store(vc_ptr + h[:, None] * stride_vch + j[None, :] * stride_vcd, vb.to(tl.uint8), mask=mask)
    tl.store(ks_ptr + h * stride_sh, sk, mask=h < NUM_KV_HEADS)
    tl.store(vs_ptr + h * stride_sh, sv, mask=h < NUM_KV_HEADS)


@triton.jit
def _write_kv_kernel(
    key_ptr,
    value_ptr,
    k_cache_ptr,
    v_cache_ptr,
    ks_ptr,
    vs_ptr,
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
    stride_vcd,
    stride_sb,
    stride_st,
    stride_sh,
    QUANT: tl.constexpr,
    QMAX_: tl.constexpr,
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
            v_cache_ptr
            + blk * stride_vcb
            + off * stride_vct
            + h[:, None] * stride_vch
            + d[None, :] * stride_vcd
        )
        if QUANT == 0:
            tl.store(kc, k.to(k_cache_ptr.dtype.element_ty), mask=mask)
            tl.store(vc, v.to(v_cache_ptr.dtype.element_ty), mask=mask)
        elif QUANT == 3:
            _write_int4(
                key_ptr + t64 * stride_kt,
                value_ptr + t64 * stride_vt,
                k_cache_ptr + blk * stride_kcb + off * stride_kct,
                v_cache_ptr + blk * stride_vcb + off * stride_vct,
                ks_ptr + blk * stride_sb + off * stride_st,
                vs_ptr + blk * stride_sb + off * stride_st,
                stride_kh,
                stride_vh,
                stride_kch,
                stride_vch,
                stride_vcd,
                stride_sh,
                QMAX_,
                NUM_KV_HEADS,
                HEAD_DIM // 2,
                HEADS_PAD,
                DIM_PAD // 2,
            )
        else:
            qk, sk = quantize_heads(k.to(tl.float32), QUANT, QMAX_, k_cache_ptr.dtype.element_ty)
            qv, sv = quantize_heads(v.to(tl.float32), QUANT, QMAX_, v_cache_ptr.dtype.element_ty)
            tl.store(kc, qk, mask=mask)
            tl.store(vc, qv, mask=mask)
            s_off = blk * stride_sb + off * stride_st + h * stride_sh
            tl.store(ks_ptr + s_off, sk, mask=h < NUM_KV_HEADS)
            tl.store(vs_ptr + s_off, sv, mask=h < NUM_KV_HEADS)


def write_kv_cache(
    key: torch.Tensor,
    value: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
    k_scale: torch.Tensor | None = None,
    v_scale: torch.Tensor | None = None,
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
    quant = quant_mode(k_cache)
    stored_dim = head_dim // 2 if quant == 3 else head_dim
    if (
        k_cache.shape != v_cache.shape
        or k_cache.dim() != 4
        or tuple(k_cache.shape[2:]) != (num_kv_heads, stored_dim)
        or (quant == 3 and head_dim % 2)
    ):
        raise ValueError(
            f"caches must be [num_blocks, block_size, {num_kv_heads}, {stored_dim}]; got "
            f"{tuple(k_cache.shape)} and {tuple(v_cache.shape)}"
        )
    if slot_mapping.shape != (num_tokens,):
        raise ValueError(f"slot_mapping must be [{num_tokens}]; got {tuple(slot_mapping.shape)}")
    if k_cache.stride(3) != 1:
        raise ValueError("k_cache needs a contiguous last (head_dim) dimension")
    if quant:
        k_scale, v_scale = check_scale_layout(k_scale, v_scale)
    else:
        k_scale = v_scale = k_cache
    if num_tokens == 0:
        return
    if quant == 3:  # INT4 keys are stored rotated (kv_cache.quant); a torch matmul, not fused
        key = rotate_int4(key)
    if key.stride(2) != 1:
        key = key.contiguous()
    if value.stride(2) != 1:
        value = value.contiguous()
    _write_kv_kernel[(num_tokens,)](
        key,
        value,
        k_cache,
        v_cache,
        k_scale,
        v_scale,
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
        v_cache.stride(3),
        k_scale.stride(0) if quant else 0,
        k_scale.stride(1) if quant else 0,
        k_scale.stride(2) if quant else 0,
        QUANT=quant,
        QMAX_=qmax_of(k_cache),
        BLOCK_SIZE=k_cache.shape[1],
        NUM_KV_HEADS=num_kv_heads,
        HEAD_DIM=head_dim,
        HEADS_PAD=triton.next_power_of_2(num_kv_heads),
        DIM_PAD=triton.next_power_of_2(head_dim),
        num_warps=4 if num_kv_heads * head_dim >= 512 else 1,
    )


def check_scale_layout(
    k_scale: torch.Tensor | None, v_scale: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """The kernels index both scale views with ``k_scale``'s strides (any layout).

    Returns: ``(k_scale, v_scale)``.

    Raises:
        ValueError: a missing scale, or other strides."""
    if k_scale is None or v_scale is None:
        raise ValueError("a quantized KV cache needs k_scale and v_scale")
    if k_scale.stride() != v_scale.stride():
        raise ValueError(
            f"k_scale/v_scale need equal strides; got {k_scale.stride()} and {v_scale.stride()}"
        )
    return k_scale, v_scale
