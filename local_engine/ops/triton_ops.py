"""Triton kernels of :mod:`local_engine.ops` (one launch each).

- ``_rms_norm_kernel``: one program per token row; optional residual add written back in
  place; float32 statistics; the normalised row is rounded to the input dtype before the weight
  multiply, as Hugging Face ``LlamaRMSNorm`` does.
- ``_rotary_kv_kernel``: one program per token; rotates all query heads in place and all key
  heads in registers (rotate-half form, float32 arithmetic on the float32 cos/sin tables), then
  stores the rotated keys and the values at ``slot_mapping[t]`` of the paged caches (skipped
  for a negative slot).
- ``_silu_mul_kernel``: a 2-D grid (token, column tile) computing ``silu(gate) * up`` in float32.

Launch choices depend only on shapes, so every launch can be captured in a CUDA graph.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from local_engine.attention.triton_kv_write import (
    check_scale_layout,
    qmax_of,
    quant_mode,
    quantize_rows,
)
from local_engine.attention.triton_kv_write import write_kv_cache as _write_kv_cache


@triton.jit
def _rms_norm_kernel(
    x_ptr,
    res_ptr,
    w_ptr,
    out_ptr,
    stride_x,
    stride_r,
    stride_o,
    N,
    eps,
    HAS_RES: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < N
    x = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=0.0)
    if HAS_RES:
        r = tl.load(res_ptr + row * stride_r + cols, mask=mask, other=0.0)
        x = (x.to(tl.float32) + r.to(tl.float32)).to(x_ptr.dtype.element_ty)
        tl.store(res_ptr + row * stride_r + cols, x, mask=mask)
    xf = x.to(tl.float32)
    var = tl.sum(xf * xf, axis=0) / N
    normed = (xf * tl.rsqrt(var + eps)).to(x_ptr.dtype.element_ty)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0)
    y = normed.to(tl.float32) * w.to(tl.float32)
    tl.store(out_ptr + row * stride_o + cols, y.to(out_ptr.dtype.element_ty), mask=mask)


def rms_norm(x, weight, eps, residual=None):
    """See :func:`local_engine.ops.rms_norm`; ``residual`` is updated in place."""
    T, N = x.shape
    out = torch.empty_like(x)
    if x.stride(1) != 1:
        x = x.contiguous()
    if residual is not None and residual.stride(1) != 1:
        raise ValueError(
            "rms_norm: residual needs a contiguous last dimension (it is written in place)"
        )
    if T == 0:
        return out, (x if residual is None else residual)
    block = triton.next_power_of_2(N)
    res = residual if residual is not None else x
    _rms_norm_kernel[(T,)](
        x,
        res,
        weight,
        out,
        x.stride(0),
        res.stride(0),
        out.stride(0),
        N,
        eps,
        HAS_RES=residual is not None,
        BLOCK_N=block,
        num_warps=8 if block >= 4096 else (4 if block >= 1024 else 1),
    )
    return out, res


@triton.jit
def _rotary_kv_kernel(
    q_ptr,
    k_ptr,
    v_ptr,
    pos_ptr,
    cos_ptr,
    sin_ptr,
    kc_ptr,
    vc_ptr,
    ks_ptr,
    vs_ptr,
    slot_ptr,
    stride_qt,
    stride_qh,
    stride_kt,
    stride_kh,
    stride_vt,
    stride_vh,
    stride_cos,
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
    NUM_HEADS: tl.constexpr,
    NUM_KV_HEADS: tl.constexpr,
    HALF: tl.constexpr,
    HQ_PAD: tl.constexpr,
    HK_PAD: tl.constexpr,
    HALF_PAD: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
):
    t = tl.program_id(0).to(tl.int64)
    pos = tl.load(pos_ptr + t).to(tl.int64)
    d = tl.arange(0, HALF_PAD)
    dmask = d < HALF
    c = tl.load(cos_ptr + pos * stride_cos + d, mask=dmask, other=0.0)[None, :]
    s = tl.load(sin_ptr + pos * stride_cos + d, mask=dmask, other=0.0)[None, :]

    hq = tl.arange(0, HQ_PAD)
    qmask = (hq < NUM_HEADS)[:, None] & dmask[None, :]
    q1p = q_ptr + t * stride_qt + hq[:, None] * stride_qh + d[None, :]
    q1 = tl.load(q1p, mask=qmask, other=0.0).to(tl.float32)
    q2 = tl.load(q1p + HALF, mask=qmask, other=0.0).to(tl.float32)
    tl.store(q1p, (q1 * c - q2 * s).to(q_ptr.dtype.element_ty), mask=qmask)
    tl.store(q1p + HALF, (q2 * c + q1 * s).to(q_ptr.dtype.element_ty), mask=qmask)

    slot = tl.load(slot_ptr + t).to(tl.int64)
    if slot >= 0:
        blk = slot // BLOCK_SIZE
        off = slot % BLOCK_SIZE
        hk = tl.arange(0, HK_PAD)
        kmask = (hk < NUM_KV_HEADS)[:, None] & dmask[None, :]
        k1p = k_ptr + t * stride_kt + hk[:, None] * stride_kh + d[None, :]
        k1 = tl.load(k1p, mask=kmask, other=0.0).to(tl.float32)
        k2 = tl.load(k1p + HALF, mask=kmask, other=0.0).to(tl.float32)
        kc = kc_ptr + blk * stride_kcb + off * stride_kct + hk[:, None] * stride_kch + d[None, :]
        v1p = v_ptr + t * stride_vt + hk[:, None] * stride_vh + d[None, :]
        vc = (
            vc_ptr
            + blk * stride_vcb
            + off * stride_vct
            + hk[:, None] * stride_vch
            + d[None, :] * stride_vcd
        )  # V may be token-minor (quantized pools, kv_cache.quant.DEFAULT_LAYOUT)
        if QUANT == 0:
            tl.store(kc, (k1 * c - k2 * s).to(kc_ptr.dtype.element_ty), mask=kmask)
            tl.store(kc + HALF, (k2 * c + k1 * s).to(kc_ptr.dtype.element_ty), mask=kmask)
            tl.store(vc, tl.load(v1p, mask=kmask).to(vc_ptr.dtype.element_ty), mask=kmask)
            tl.store(
                vc + HALF * stride_vcd,
                tl.load(v1p + HALF, mask=kmask).to(vc_ptr.dtype.element_ty),
                mask=kmask,
            )
        else:
            # quantize what the unquantized path would store: the rotated key rounded to k's
            # dtype (as the torch reference rotates in that dtype), one scale per token-head
            in_ty = k_ptr.dtype.element_ty
            r1 = (k1 * c - k2 * s).to(in_ty).to(tl.float32)
            r2 = (k2 * c + k1 * s).to(in_ty).to(tl.float32)
            r1 = tl.where(kmask, r1, 0.0)
            r2 = tl.where(kmask, r2, 0.0)
            sk = tl.maximum(tl.max(tl.abs(r1), 1), tl.max(tl.abs(r2), 1)) / QMAX_
        if QUANT != 0:
            out_ty = kc_ptr.dtype.element_ty
            tl.store(kc, quantize_rows(r1, sk, QUANT, QMAX_, out_ty), mask=kmask)
            tl.store(kc + HALF, quantize_rows(r2, sk, QUANT, QMAX_, out_ty), mask=kmask)
            v1 = tl.load(v1p, mask=kmask, other=0.0).to(tl.float32)
            v2 = tl.load(v1p + HALF, mask=kmask, other=0.0).to(tl.float32)
            sv = tl.maximum(tl.max(tl.abs(v1), 1), tl.max(tl.abs(v2), 1)) / QMAX_
            tl.store(vc, quantize_rows(v1, sv, QUANT, QMAX_, out_ty), mask=kmask)
            tl.store(
                vc + HALF * stride_vcd, quantize_rows(v2, sv, QUANT, QMAX_, out_ty), mask=kmask
            )
            s_off = blk * stride_sb + off * stride_st + hk * stride_sh
            tl.store(ks_ptr + s_off, sk, mask=hk < NUM_KV_HEADS)
            tl.store(vs_ptr + s_off, sv, mask=hk < NUM_KV_HEADS)


def rotary_and_write_kv(
    q, k, v, positions, cos, sin, k_cache, v_cache, slot_mapping, k_scale=None, v_scale=None
):
    """See :func:`local_engine.ops.rotary_and_write_kv`; ``q`` is rotated in place; a
    quantized cache (int8 / float8_e4m3fn) is written with per-token-head scales.

    Raises:
        ValueError: a tensor whose last dimension is not contiguous, an odd head_dim, tables
            that are not float32 ``[max_positions, head_dim]``, or caches of the wrong shape.
    """
    T, H, D = q.shape
    Hk = k.shape[1]
    if D % 2:
        raise ValueError(f"rotary_and_write_kv: head_dim must be even, got {D}")
    for name, t in (("q", q), ("k", k), ("v", v), ("k_cache", k_cache)):
        if t.stride(-1) != 1:
            raise ValueError(f"rotary_and_write_kv: {name} needs a contiguous last dimension")
    if cos.dtype != torch.float32 or cos.shape != sin.shape or cos.dim() != 2 or cos.shape[1] != D:
        raise ValueError(
            f"rotary_and_write_kv: cos/sin must be float32 [max_positions, {D}]; got "
            f"{cos.dtype} {tuple(cos.shape)}"
        )
    from local_engine.kv_cache.int2 import is_int2

    if is_int2(k_cache, k_scale):
        # int2 (kv_cache.int2): the rotary in torch, then its write + finalize launches
        from local_engine.attention import triton_int2
        from local_engine.ops.torch_ops import _rotary_rows, _rotate

        c, s = _rotary_rows(positions, cos, sin, q.dtype)
        q.copy_(_rotate(q, c, s))
        triton_int2.write_kv_cache(
            _rotate(k, c, s), v, k_cache, v_cache, slot_mapping, k_scale, v_scale
        )
        return q
    quant = quant_mode(k_cache)
    stored = D // 2 if quant == 3 else D  # packed INT4: two values per byte
    if (
        k_cache.shape != v_cache.shape
        or k_cache.dim() != 4
        or tuple(k_cache.shape[2:]) != (Hk, stored)
    ):
        raise ValueError(
            f"rotary_and_write_kv: caches must be [num_blocks, block_size, {Hk}, {stored}]; got "
            f"{tuple(k_cache.shape)}"
        )
    if quant:
        k_scale, v_scale = check_scale_layout(k_scale, v_scale)
    else:
        k_scale = v_scale = k_cache
    if T == 0:
        return q
    if quant == 3:
        # INT4 keys go in rotated by a Hadamard matrix after the rotary embedding
        # (kv_cache.quant): the rotary in torch here, the rotation and the packed write in
        # write_kv_cache (not fused)
        from local_engine.ops.torch_ops import _rotary_rows, _rotate

        c, s = _rotary_rows(positions, cos, sin, q.dtype)
        q.copy_(_rotate(q, c, s))
        _write_kv_cache(_rotate(k, c, s), v, k_cache, v_cache, slot_mapping, k_scale, v_scale)
        return q
    half = D // 2
    _rotary_kv_kernel[(T,)](
        q,
        k,
        v,
        positions,
        cos,
        sin,
        k_cache,
        v_cache,
        k_scale,
        v_scale,
        slot_mapping,
        q.stride(0),
        q.stride(1),
        k.stride(0),
        k.stride(1),
        v.stride(0),
        v.stride(1),
        cos.stride(0),
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
        NUM_HEADS=H,
        NUM_KV_HEADS=Hk,
        HALF=half,
        HQ_PAD=triton.next_power_of_2(H),
        HK_PAD=triton.next_power_of_2(Hk),
        HALF_PAD=triton.next_power_of_2(half),
        BLOCK_SIZE=k_cache.shape[1],
        num_warps=4 if H * D >= 2048 else 1,
    )
    return q


@triton.jit
def _silu_mul_kernel(x_ptr, out_ptr, stride_x, stride_o, inter, BLOCK: tl.constexpr):
    t = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < inter
    g = tl.load(x_ptr + t * stride_x + cols, mask=mask, other=0.0).to(tl.float32)
    u = tl.load(x_ptr + t * stride_x + inter + cols, mask=mask, other=0.0).to(tl.float32)
    y = g / (1.0 + tl.exp(-g)) * u
    tl.store(out_ptr + t * stride_o + cols, y.to(out_ptr.dtype.element_ty), mask=mask)


def silu_and_mul(x):
    """See :func:`local_engine.ops.silu_and_mul`."""
    T, two_i = x.shape
    inter = two_i // 2
    out = torch.empty((T, inter), dtype=x.dtype, device=x.device)
    if T == 0:
        return out
    if x.stride(1) != 1:
        x = x.contiguous()
    block = min(1024, triton.next_power_of_2(inter))
    _silu_mul_kernel[(T, triton.cdiv(inter, block))](
        x, out, x.stride(0), out.stride(0), inter, BLOCK=block, num_warps=4 if block >= 512 else 1
    )
    return out
