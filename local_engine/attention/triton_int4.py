"""Triton paged attention over the packed INT4 cache (``QUANT == 3``), split-half form.

The INT4 format (:mod:`local_engine.kv_cache.quant`) stores channel ``j`` in the low nibble
and channel ``j + D/2`` in the high nibble of byte ``j`` (``D`` = head_dim). So one load of a
packed tile (``D/2`` bytes per key) gives both halves of the head dimension at once, and a
score is ``q . k = q[:D/2] . k_lo + q[D/2:] . k_hi``: two ``tl.dot`` of depth ``D/2`` against
the low and high nibbles, with no interleave and no per-element select. For ``P @ V`` the
output splits the same way: two accumulators ``[rows, D/2]`` (channels ``0..D/2`` and
``D/2..D``), each the product of the probabilities with one nibble tile. Scales stay per
key: K's multiply the score columns, V's the probability columns (as for INT8).

``INT4_CVT`` picks how the 4-bit codes ``c`` (value ``c - 8``) become matrix operands for 16-bit
queries, both by the magic-number trick: the code OR'ed into the bit pattern of ``2**m`` (bf16
``0x4300`` = 128, fp16 ``0x6400`` = 1024: ``2**m`` has an ulp of 1, so the pattern is ``2**m +
c`` exactly), bit-cast to the query dtype, with no conversion unit:

- 1: by Triton bit operations, per value;
- 2: by inline PTX on four packed bytes at once (:func:`_magic_prmt`: one mask and two
  ``prmt`` per 4 values); the interpreter (no PTX) runs 1's code (the launcher passes 1 for
  CPU tensors).

``INT4_FOLD``: the operand keeps its constant offset (``OFF = 2**m + 8``: operand = value +
``OFF``) and the kernel subtracts it once per row instead of once per
value: ``q . (k + OFF) - OFF * sum(q)`` for scores, ``pw . (v + OFF) - OFF * sum(pw)`` for the
output (``pw`` the probabilities times V's scales as rounded for the product). Products of
16-bit operands are exact in the float32 accumulator; the subtraction loses ``~2**-24 *
OFF * sum|q|`` (bf16 ``OFF`` 136: relative ~1e-5 of a score). Without it each operand is
shifted back (``- OFF``) in the query dtype, exactly (small integers).

Float32 queries (``DOT_MODE`` 1) convert the codes to float32 (``c - 8``); the interpreter with
bf16 (``DOT_MODE`` 2) multiplies bf16-valued operands in float32, as
:func:`~local_engine.attention.triton_attention._float_dot` does.
"""

from __future__ import annotations

import triton
import triton.language as tl

NEG_BIG_INT4 = tl.constexpr(-1.0e30)


@triton.jit
def code_offset(FOLD: tl.constexpr, DOT_MODE: tl.constexpr, dtype):
    """``OFF``: operand = value + OFF (0 unless ``FOLD`` with 16-bit queries)."""
    off = 0.0
    if FOLD and DOT_MODE != 1:
        if dtype == tl.float16:
            off = 1032.0
        else:
            off = 136.0
    return off


@triton.jit
def nibble_operands(
    b, dtype: tl.constexpr, CVT: tl.constexpr, FOLD: tl.constexpr, DOT_MODE: tl.constexpr
):
    """Packed bytes ``b`` (uint8 tile) -> ``(lo, hi)`` operand tiles: the low and high nibbles'
    values plus :func:`code_offset` (query dtype; float32 in the interpreter and for float32
    queries, holding the same values)."""
    lo = b & 15
    hi = b >> 4
    if DOT_MODE == 1:  # float32 queries: exact float32 values
        x_lo = lo.to(tl.float32) - 8.0
        x_hi = hi.to(tl.float32) - 8.0
    elif CVT == 2 and DOT_MODE == 0:
        x_lo = _magic_prmt(b, dtype, False)
        x_hi = _magic_prmt(b, dtype, True)
        if not FOLD:
            bias = tl.full((), 1032.0 if dtype == tl.float16 else 136.0, dtype)
            x_lo = x_lo - bias
            x_hi = x_hi - bias
    else:  # 1 (and 2 in the interpreter: the same values)
        if dtype == tl.float16:  # 0x6400 = 1024.0
            x_lo = (lo.to(tl.int16) | 0x6400).to(dtype, bitcast=True)
            x_hi = (hi.to(tl.int16) | 0x6400).to(dtype, bitcast=True)
            bias = tl.full((), 1032.0, dtype)
        else:  # bf16: 0x4300 = 128.0
            x_lo = (lo.to(tl.int16) | 0x4300).to(dtype, bitcast=True)
            x_hi = (hi.to(tl.int16) | 0x4300).to(dtype, bitcast=True)
            bias = tl.full((), 136.0, dtype)
        if DOT_MODE == 2:  # interpreter: its bf16 arithmetic is wrong; exact in float32
            x_lo = x_lo.to(tl.float32)
            x_hi = x_hi.to(tl.float32)
            bias = bias.to(tl.float32)
        if not FOLD:  # exact: 2**m + c - (2**m + 8) = c - 8
            x_lo = x_lo - bias
            x_hi = x_hi - bias
    return x_lo, x_hi


@triton.jit
def _magic_prmt(b, dtype: tl.constexpr, HIGH: tl.constexpr):
    """``INT4_CVT`` 2 on the GPU: the magic-number operands of the low (or ``HIGH``) nibbles of
    uint8 tile ``b`` by PTX on 4 bytes at a time: one mask (``and 0x0F0F0F0F``, after ``shr 4``
    for the high nibbles) and two ``prmt`` that interleave the 4 codes with the exponent byte
    (bf16 ``0x43``: 128 + c; fp16 ``0x64``: 1024 + c), 2 values per 32-bit register."""
    if dtype == tl.float16:
        if HIGH:
            x = tl.inline_asm_elementwise(
                "{ .reg .b32 t; shr.b32 t, $2, 4; and.b32 t, t, 0x0F0F0F0F; "
                "prmt.b32 $0, t, 0x64646464, 0x4140; prmt.b32 $1, t, 0x64646464, 0x4342; }",
                "=r,=r,r",
                [b],
                dtype=tl.float16,
                is_pure=True,
                pack=4,
            )
        else:
            x = tl.inline_asm_elementwise(
                "{ .reg .b32 t; and.b32 t, $2, 0x0F0F0F0F; "
                "prmt.b32 $0, t, 0x64646464, 0x4140; prmt.b32 $1, t, 0x64646464, 0x4342; }",
                "=r,=r,r",
                [b],
                dtype=tl.float16,
                is_pure=True,
                pack=4,
            )
    else:
        if HIGH:
            x = tl.inline_asm_elementwise(
                "{ .reg .b32 t; shr.b32 t, $2, 4; and.b32 t, t, 0x0F0F0F0F; "
                "prmt.b32 $0, t, 0x43434343, 0x4140; prmt.b32 $1, t, 0x43434343, 0x4342; }",
                "=r,=r,r",
                [b],
                dtype=tl.bfloat16,
                is_pure=True,
                pack=4,
            )
        else:
            x = tl.inline_asm_elementwise(
                "{ .reg .b32 t; and.b32 t, $2, 0x0F0F0F0F; "
                "prmt.b32 $0, t, 0x43434343, 0x4140; prmt.b32 $1, t, 0x43434343, 0x4342; }",
                "=r,=r,r",
                [b],
                dtype=tl.bfloat16,
                is_pure=True,
                pack=4,
            )
    return x


@triton.jit
def _dot(a, b, DOT_MODE: tl.constexpr, acc=None):
    """``a @ b (+ acc)`` with a float32 accumulator: 16-bit operands on the GPU; float32 IEEE
    for float32 queries and in the interpreter (``a`` rounded to ``b``'s values already)."""
    if DOT_MODE == 0:
        c = tl.dot(a, b, acc)
    else:
        c = tl.dot(a.to(tl.float32), b.to(tl.float32), acc, input_precision="ieee")
    return c


@triton.jit
def _operand(x, dtype: tl.constexpr, DOT_MODE: tl.constexpr):
    """float32 ``x`` as a product operand: the query dtype (float32 in the interpreter, holding
    the query-dtype value)."""
    if DOT_MODE == 0:
        y = x.to(dtype)
    elif DOT_MODE == 2:
        y = x.to(dtype).to(tl.float32)
    else:
        y = x
    return y


@triton.jit
def int4_tile(
    acc_lo,
    acc_hi,
    l_i,
    c_i,
    m_i,
    q_lo,
    q_hi,
    q_fold,
    t,
    bt_row,
    k_ptr,
    v_ptr,
    ks_ptr,
    vs_ptr,
    kv_head_off_k,
    kv_head_off_v,
    kvh,
    ctx,
    pos,
    qk_scale,
    stride_kb,
    stride_kt,
    stride_vb,
    stride_vt,
    stride_sb,
    stride_st,
    stride_vd,
    stride_sh,
    HALF: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
    TILE_N: tl.constexpr,
    MASKED: tl.constexpr,
    DOT_MODE: tl.constexpr,
    V_TOKEN_MINOR: tl.constexpr,
    SCALE_TOKEN_MINOR: tl.constexpr,
    CVT: tl.constexpr,
    FOLD: tl.constexpr,
    QDT: tl.constexpr,
):
    """One key tile of the online softmax over the packed cache: returns the updated
    ``(acc_lo, acc_hi, l_i, c_i, m_i)``; ``c_i``: the running ``sum(pw)`` per row (rescaled as
    ``l_i``) whose ``OFF`` multiple the folded accumulators hold in excess (subtracted once, at
    the end). ``q_fold``: ``OFF * sum_d q`` per row (0 unless folded);
    ``QDT``: the query dtype (the operands')."""
    dtype: tl.constexpr = QDT
    n = t * TILE_N + tl.arange(0, TILE_N)
    if MASKED:
        n_ok = n < ctx
        if V_TOKEN_MINOR:  # whole blocks, so the loads stay vectors (triton_attention)
            n_ok = (n // BLOCK_SIZE) * BLOCK_SIZE < ctx
        blk = tl.load(bt_row + n // BLOCK_SIZE, mask=n_ok, other=0).to(tl.int64)
    else:
        blk = tl.load(bt_row + n // BLOCK_SIZE).to(tl.int64)
    slot = n % BLOCK_SIZE
    j = tl.arange(0, HALF)
    k_idx = (blk * stride_kb + slot * stride_kt + kv_head_off_k)[None, :] + j[:, None]
    v_idx = (blk * stride_vb + slot * stride_vt + kv_head_off_v)[:, None] + j[None, :] * stride_vd
    if V_TOKEN_MINOR:
        v_idx = tl.max_contiguous(tl.multiple_of(v_idx, [BLOCK_SIZE, 1]), [BLOCK_SIZE, 1])
    s_off = blk * stride_sb + slot * stride_st + kvh * stride_sh
    if SCALE_TOKEN_MINOR:
        s_off = tl.max_contiguous(tl.multiple_of(s_off, BLOCK_SIZE), BLOCK_SIZE)
    if MASKED:
        kb = tl.load(k_ptr + k_idx, mask=n_ok[None, :], other=0x88)
        vb = tl.load(v_ptr + v_idx, mask=n_ok[:, None], other=0x88)
        k_sc = tl.load(ks_ptr + s_off, mask=n_ok, other=0.0)
        v_sc = tl.load(vs_ptr + s_off, mask=n_ok, other=0.0)
        # keys past ctx (read whole blocks): finite codes, but their scales must not reach P @ V
        v_sc = tl.where(n < ctx, v_sc, 0.0)
    else:
        kb = tl.load(k_ptr + k_idx)
        vb = tl.load(v_ptr + v_idx)
        k_sc = tl.load(ks_ptr + s_off)
        v_sc = tl.load(vs_ptr + s_off)
    k_lo, k_hi = nibble_operands(kb, dtype, CVT, FOLD, DOT_MODE)
    s = _dot(q_hi, k_hi, DOT_MODE, _dot(q_lo, k_lo, DOT_MODE))  # [BLOCK_M, TILE_N]
    if FOLD:
        s = s - q_fold[:, None]
    s = s * (k_sc * qk_scale)[None, :]
    if MASKED:
        s = tl.where(n[None, :] <= pos[:, None], s, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(s, 1))
    p = tl.exp2(s - m_new[:, None])
    alpha = tl.exp2(m_i - m_new)
    l_i = l_i * alpha + tl.sum(p, 1)
    acc_lo = acc_lo * alpha[:, None]
    acc_hi = acc_hi * alpha[:, None]
    c_i = c_i * alpha
    pw = _operand(p * v_sc[None, :], dtype, DOT_MODE)
    v_lo, v_hi = nibble_operands(vb, dtype, CVT, FOLD, DOT_MODE)
    acc_lo = _dot(pw, v_lo, DOT_MODE, acc_lo)
    acc_hi = _dot(pw, v_hi, DOT_MODE, acc_hi)
    if FOLD:
        c_i = c_i + tl.sum(pw.to(tl.float32), 1)
    return acc_lo, acc_hi, l_i, c_i, m_new


@triton.jit
def int4_rows(
    out_ptr,
    seg_out_ptr,
    seg_max_ptr,
    seg_sum_ptr,
    q_ptr,
    k_ptr,
    v_ptr,
    ks_ptr,
    vs_ptr,
    bt_ptr,
    seq,
    q_start,
    q_len,
    q_off,
    ctx,
    kvh,
    seg,
    qk_scale,
    num_segments,
    stride_qt,
    stride_qh,
    stride_ot,
    stride_oh,
    stride_kb,
    stride_kt,
    stride_kh,
    stride_vb,
    stride_vt,
    stride_vh,
    stride_bt,
    stride_sb,
    stride_st,
    stride_vd,
    stride_sh,
    NUM_HEADS: tl.constexpr,
    G: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_Q: tl.constexpr,
    TILE_N: tl.constexpr,
    SPLIT: tl.constexpr,
    DOT_MODE: tl.constexpr,
    NUM_STAGES: tl.constexpr,
    V_TOKEN_MINOR: tl.constexpr,
    SCALE_TOKEN_MINOR: tl.constexpr,
    CVT: tl.constexpr,
    FOLD: tl.constexpr,
):
    """The rows ``q_off .. q_off + BLOCK_Q`` (x the ``G`` heads of KV head ``kvh``) of sequence
    ``seq`` over its packed INT4 context (key tiles ``[t_lo, t_hi)`` of segment ``seg`` with
    ``SPLIT``): the same program layout, causal mask and split-K partials as
    :func:`~local_engine.attention.triton_attention.paged_attention_kernel`, with the
    head dimension in two halves (module docstring). ``HEAD_DIM`` a power of two >= 32;
    ``q_ptr`` holds the queries already rotated like the keys (``q H``)."""
    HALF: tl.constexpr = HEAD_DIM // 2
    rows = tl.arange(0, BLOCK_M)
    q_idx = q_off + rows // G
    head = kvh * G + rows % G
    row_ok = (rows < BLOCK_Q * G) & (q_idx < q_len)
    pos = ctx - q_len + q_idx
    tok = (q_start + q_idx).to(tl.int64)
    h = tl.arange(0, HALF)
    q_row = q_ptr + tok[:, None] * stride_qt + head[:, None] * stride_qh + h[None, :]
    q_lo = tl.load(q_row, mask=row_ok[:, None], other=0.0)
    q_hi = tl.load(q_row + HALF, mask=row_ok[:, None], other=0.0)
    q_sum = tl.sum(q_lo.to(tl.float32), 1) + tl.sum(q_hi.to(tl.float32), 1)
    q_fold = q_sum * code_offset(FOLD, DOT_MODE, q_ptr.dtype.element_ty)

    first_pos = ctx - q_len + q_off
    last_pos = ctx - q_len + tl.minimum(q_off + BLOCK_Q, q_len) - 1
    n_tiles = tl.cdiv(last_pos + 1, TILE_N)
    n_full = (first_pos + 1) // TILE_N  # tiles with every key <= every row's position
    if SPLIT:
        per_seg = tl.cdiv(tl.cdiv(ctx, TILE_N), num_segments)
        t_lo = seg * per_seg
        t_hi = tl.minimum(t_lo + per_seg, n_tiles)
    else:
        t_lo = 0
        t_hi = n_tiles
    m_i = tl.full([BLOCK_M], NEG_BIG_INT4, tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    c_i = tl.zeros([BLOCK_M], tl.float32)
    acc_lo = tl.zeros([BLOCK_M, HALF], tl.float32)
    acc_hi = tl.zeros([BLOCK_M, HALF], tl.float32)
    bt_row = bt_ptr + seq.to(tl.int64) * stride_bt
    for t in tl.range(t_lo, tl.minimum(t_hi, n_full), num_stages=NUM_STAGES):
        acc_lo, acc_hi, l_i, c_i, m_i = int4_tile(
            acc_lo,
            acc_hi,
            l_i,
            c_i,
            m_i,
            q_lo,
            q_hi,
            q_fold,
            t,
            bt_row,
            k_ptr,
            v_ptr,
            ks_ptr,
            vs_ptr,
            kvh * stride_kh,
            kvh * stride_vh,
            kvh,
            ctx,
            pos,
            qk_scale,
            stride_kb,
            stride_kt,
            stride_vb,
            stride_vt,
            stride_sb,
            stride_st,
            stride_vd,
            stride_sh,
            HALF,
            BLOCK_SIZE,
            TILE_N,
            False,
            DOT_MODE,
            V_TOKEN_MINOR,
            SCALE_TOKEN_MINOR,
            CVT,
            FOLD,
            q_ptr.dtype.element_ty,
        )
    for t in tl.range(tl.maximum(t_lo, n_full), t_hi):
        acc_lo, acc_hi, l_i, c_i, m_i = int4_tile(
            acc_lo,
            acc_hi,
            l_i,
            c_i,
            m_i,
            q_lo,
            q_hi,
            q_fold,
            t,
            bt_row,
            k_ptr,
            v_ptr,
            ks_ptr,
            vs_ptr,
            kvh * stride_kh,
            kvh * stride_vh,
            kvh,
            ctx,
            pos,
            qk_scale,
            stride_kb,
            stride_kt,
            stride_vb,
            stride_vt,
            stride_sb,
            stride_st,
            stride_vd,
            stride_sh,
            HALF,
            BLOCK_SIZE,
            TILE_N,
            True,
            DOT_MODE,
            V_TOKEN_MINOR,
            SCALE_TOKEN_MINOR,
            CVT,
            FOLD,
            q_ptr.dtype.element_ty,
        )
    l_safe = tl.where(l_i == 0.0, 1.0, l_i)
    if FOLD:
        corr = code_offset(FOLD, DOT_MODE, q_ptr.dtype.element_ty) * c_i
        acc_lo = acc_lo - corr[:, None]
        acc_hi = acc_hi - corr[:, None]
    o_lo = acc_lo / l_safe[:, None]
    o_hi = acc_hi / l_safe[:, None]
    if SPLIT:
        # scratch [num_tokens, NUM_HEADS, num_segments, HEAD_DIM] (+ stats without the dim)
        stat = (tok * NUM_HEADS + head) * num_segments + seg
        dst = seg_out_ptr + stat[:, None] * HEAD_DIM + h[None, :]
        tl.store(dst, o_lo, mask=row_ok[:, None])
        tl.store(dst + HALF, o_hi, mask=row_ok[:, None])
        tl.store(seg_max_ptr + stat, m_i, mask=row_ok)
        tl.store(seg_sum_ptr + stat, l_i, mask=row_ok)
    else:
        dst = out_ptr + tok[:, None] * stride_ot + head[:, None] * stride_oh + h[None, :]
        ty = out_ptr.dtype.element_ty
        tl.store(dst, o_lo.to(ty), mask=row_ok[:, None])
        tl.store(dst + HALF, o_hi.to(ty), mask=row_ok[:, None])
