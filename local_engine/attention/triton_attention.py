"""Triton kernels for paged attention (one kernel for prefill, chunked prefill and decode).

Layout of the work: program ``(qb, kvh, seg)`` takes ``BLOCK_Q`` consecutive new tokens of one
sequence together with all ``G = num_heads // num_kv_heads`` query heads that share KV head
``kvh``: its ``BLOCK_M = BLOCK_Q * G`` query rows (row ``r`` is token ``r // G``, head
``kvh * G + r % G``) go through one ``tl.dot`` per key tile, so every K/V tile read through the
block table serves the whole group (grouped-query attention reads each KV block once per
q-block). Keys are visited in tiles of ``TILE_N`` tokens; each token's physical block comes from
the block table (``block_tables[seq, pos // block_size]``), so a tile may span several
blocks and blocks may sit anywhere in the pool. Online softmax in float32 (base-2 exponent,
the scale folded into ``qk_scale = scale * log2(e)``). ``DOT_MODE``: 0 = matrix products in the
input dtype (fp16/bf16, fp32 accumulate), 1 = fp32 inputs in IEEE precision (no tf32), 2 = the
interpreter with bf16 inputs (its bf16 ``tl.dot`` is wrong as of triton 3.9): operands rounded
to bf16 exactly as on the GPU, then multiplied in fp32.

The q-blocks of all sequences are laid out without a host sync (the same trick as vLLM's
unified Triton attention): sequence ``i`` owns program ids from
``cu_seqlens_q[i] // BLOCK_Q + i`` on, so ``num_tokens // BLOCK_Q + num_seqs`` programs always
suffice; a program finds its sequence by binary search and exits when it has no rows. That keeps
the launch grid a function of tensor shapes alone, so the kernel can be captured in CUDA graphs.

Split-K (flash-decoding): with ``NUM_SEGMENTS > 1`` the key range of each sequence is cut into
that many segments (program axis 2); each writes its normalised partial output with its row max
and sum of exponentials, and :func:`_reduce_segments_kernel` merges them.

``QUANT`` 4 is the 2-bit KIVI format (:mod:`local_engine.kv_cache.int2`,
:func:`~local_engine.attention.triton_int2.int2_tile`): keys and values dequantized to float32
in registers and multiplied as a float cache's; tiles that may hold the context's open block
(the masked ones) read it from its residual slot in the model dtype.

Quantized caches (``QUANT`` 1 = INT8, 2 = FP8 E4M3, 3 = packed INT4 unpacked to its small
integers in registers: by default the split-half program of
:mod:`~local_engine.attention.triton_int4`, ``INT4_CVT`` 0 the per-element nibble select
here; :mod:`local_engine.kv_cache.quant`): K/V
tiles are loaded as 1-byte values and converted to the query dtype in registers (exact: INT8
and E4M3 values are bf16/fp16 values); each key's float32 scale multiplies its score column
(``s = (q . k_q) * k_scale * qk_scale``) and each value's scale its probability column before
the ``P @ V`` product (``sum_n p_n * v_scale_n * v_q,n``), so nothing is dequantized in memory.

``KV_CVT`` (quantized caches): 0 = the 1-byte values converted to the query dtype, products
in that dtype (bf16/fp16, or float32 queries in float32); 1 = fp16 products for 16-bit
queries: the values cast to fp16 (exact: INT8 and E4M3 values are fp16 values), each query
row scaled by a power of two ``2**-e`` with ``2**e >= amax|q|`` (exact for bf16 queries,
whose 8 significant bits fit fp16's 11; ``2**e`` returns in the score scale), and the
probabilities times V's scales divided by the tile's largest V scale (so they lie in [0, 1],
fp16's range; 11 significant bits against bf16's 8), that factor multiplying the tile's
``P @ V``. Why two: on Hopper an E4M3 -> bf16 cast costs an ``F2F.BF16.F16`` per value after
the paired ``cvt.rn.f16x2.e4m3x2`` (the conversion unit, 16 per clock per SM), while E4M3 ->
fp16 is that one paired instruction; INT8 -> bf16 is done with integer tricks (``PRMT`` +
``HADD2.BF16``) and INT8 -> fp16 by ``I2F.F16`` per value, so INT8 is fastest in mode 0 and
FP8 in mode 1 (bench/RESULTS.md, "## kvquant", 2026-12-01 session 2).

``DECODE``: one program per query token (``BLOCK_Q = 1``, the ``G`` heads of one KV head), for
decode-shaped calls: program ``i`` checks ``cu_seqlens_q[i] == i`` and ``cu_seqlens_q[i + 1] ==
i + 1`` (every sequence one token: sequence ``i``, two independent loads) and otherwise finds
the token's sequence by binary search, so any ``cu_seqlens_q`` stays correct; no binary search
over the sequences and no idle programs in the common case.

Per key tile, the tiles wholly below the earliest query position of the q-block are visited
without the causal mask; only the last few tiles (the diagonal) compute it.
"""

from __future__ import annotations

import triton
import triton.language as tl

from local_engine.attention.triton_int2 import int2_tile
from local_engine.attention.triton_int4 import int4_rows
from local_engine.attention.triton_kv_write import unpack_int4_tile

# Finite stand-in for -inf as the running max: exp2(-inf - NEG_BIG) == 0 and no inf - inf.
NEG_BIG = tl.constexpr(-1.0e30)


@triton.jit
def _find_seq(cu_q_ptr, target, num_seqs, BLOCK_Q: tl.constexpr):
    """Largest ``i`` in ``[0, num_seqs)`` with ``cu_q[i] // BLOCK_Q + i <= target``."""
    lo = tl.full((), 0, tl.int32)
    hi = tl.full((), 0, tl.int32) + num_seqs - 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        start = tl.load(cu_q_ptr + mid) // BLOCK_Q + mid
        if start <= target:
            lo = mid
        else:
            hi = mid - 1
    return lo


@triton.jit
def _kv_to_f16(x, DOT_MODE: tl.constexpr):
    """1-byte K/V values as fp16 operands of the fp16 products (see ``KV_CVT``); under the
    interpreter (``DOT_MODE`` 2) as float32 holding the same values."""
    if DOT_MODE != 0:
        y = x.to(tl.float32)  # INT8 / E4M3 values are exact in fp16 and float32
    else:
        y = x.to(tl.float16)
    return y


@triton.jit
def _attend_tile(
    acc,
    l_i,
    m_i,
    q,
    q_row_scale,
    q_rot,
    t,
    bt_row,
    k_ptr,
    km_ptr,
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
    offs_d,
    QUANT: tl.constexpr,
    KV_CVT: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    HEAD_DIM_PAD: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
    TILE_N: tl.constexpr,
    MASKED: tl.constexpr,
    DOT_MODE: tl.constexpr,
    V_TOKEN_MINOR: tl.constexpr,
    SCALE_TOKEN_MINOR: tl.constexpr,
):
    n = t * TILE_N + tl.arange(0, TILE_N)
    if MASKED:
        n_ok = n < ctx
        if V_TOKEN_MINOR:
            # whole blocks (constant over runs of BLOCK_SIZE keys, so the loads stay vectors):
            # the context's last block is allocated, its keys past ctx are finite values from
            # the quantizer (or the pool's zeros) and get p = 0 from the causal mask below
            n_ok = (n // BLOCK_SIZE) * BLOCK_SIZE < ctx
        blk = tl.load(bt_row + n // BLOCK_SIZE, mask=n_ok, other=0).to(tl.int64)
    else:
        blk = tl.load(bt_row + n // BLOCK_SIZE).to(tl.int64)
    slot_in_blk = n % BLOCK_SIZE
    if QUANT == 4:  # int2 (KIVI): dequantized in registers, float products
        if not MASKED:
            n_ok = n >= 0
        k, v = int2_tile(
            k_ptr,
            km_ptr,
            v_ptr,
            vs_ptr,
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
            stride_sb,
            stride_st,
            stride_sh,
            stride_vd,  # int2: the pool's block count
            offs_d,
            HEAD_DIM,
            BLOCK_SIZE,
            MASKED or TILE_N < BLOCK_SIZE,  # tiles that may hold the open block
        )
        s = _float_dot(q, k, DOT_MODE) * qk_scale
        if MASKED:
            s = tl.where(n[None, :] <= pos[:, None], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        p = tl.exp2(s - m_new[:, None])
        alpha = tl.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + _float_dot(p.to(q.dtype), v, DOT_MODE)
    else:
        k_off = blk * stride_kb + slot_in_blk * stride_kt + kv_head_off_k  # [TILE_N]
        v_off = blk * stride_vb + slot_in_blk * stride_vt + kv_head_off_v
        # K^T tile [HEAD_DIM_PAD, TILE_N], V tile [TILE_N, HEAD_DIM_PAD]
        if QUANT == 3:  # packed INT4: channel d is in byte d mod HEAD_DIM/2 (split-half nibbles)
            d_byte = offs_d % (HEAD_DIM // 2)
            k_idx = k_off[None, :] + d_byte[:, None]
            v_idx = v_off[:, None] + d_byte[None, :] * stride_vd
        else:
            k_idx = k_off[None, :] + offs_d[:, None]
            v_idx = v_off[:, None] + offs_d[None, :] * stride_vd
        if V_TOKEN_MINOR:
            # V stored [head_dim, block_size] per block and head: keys contiguous in runs of a
            # block (the loaded block ids hide that from triton's analysis, so say it)
            v_idx = tl.max_contiguous(tl.multiple_of(v_idx, [BLOCK_SIZE, 1]), [BLOCK_SIZE, 1])
        if HEAD_DIM_PAD == HEAD_DIM:
            if MASKED:
                k = tl.load(k_ptr + k_idx, mask=n_ok[None, :], other=0.0)
                v = tl.load(v_ptr + v_idx, mask=n_ok[:, None], other=0.0)
            else:
                k = tl.load(k_ptr + k_idx)
                v = tl.load(v_ptr + v_idx)
        else:
            d_ok = offs_d < HEAD_DIM
            if MASKED:
                k = tl.load(k_ptr + k_idx, mask=d_ok[:, None] & n_ok[None, :], other=0.0)
                v = tl.load(v_ptr + v_idx, mask=n_ok[:, None] & d_ok[None, :], other=0.0)
            else:
                k = tl.load(k_ptr + k_idx, mask=d_ok[:, None], other=0.0)
                v = tl.load(v_ptr + v_idx, mask=d_ok[None, :], other=0.0)
        if QUANT == 3:  # dequantized in registers: the codes here, the scales below
            hi = offs_d >= HEAD_DIM // 2
            k = unpack_int4_tile(k, hi[:, None])
            v = unpack_int4_tile(v, hi[None, :])
        if QUANT != 0:
            # per-(token, KV head) scales: K's scales the score columns, V's the probabilities
            s_off = blk * stride_sb + slot_in_blk * stride_st + kvh * stride_sh
            if SCALE_TOKEN_MINOR:  # scales [kv_heads, block_size] per block
                s_off = tl.max_contiguous(tl.multiple_of(s_off, BLOCK_SIZE), BLOCK_SIZE)
            if MASKED:
                k_sc = tl.load(ks_ptr + s_off, mask=n_ok, other=0.0)
                v_sc = tl.load(vs_ptr + s_off, mask=n_ok, other=0.0)
            else:
                k_sc = tl.load(ks_ptr + s_off)
                v_sc = tl.load(vs_ptr + s_off)
            if MASKED and V_TOKEN_MINOR:
                # keys past ctx in the last block were read whole: whatever bytes they hold (a
                # NaN E4M3 pattern too) must not reach P @ V (0 * NaN); their scores are masked
                in_ctx = n < ctx
                v = tl.where(in_ctx[:, None], v, tl.zeros_like(v))
                v_sc = tl.where(in_ctx, v_sc, 0.0)
        if QUANT != 0 and KV_CVT != 0:
            # fp16 products: q pre-scaled per row, 1-byte values exact in fp16
            s = _mma(q, _kv_to_f16(k, DOT_MODE), DOT_MODE)
            s = s * q_row_scale[:, None] * k_sc[None, :]
        else:
            if DOT_MODE == 0:
                s = tl.dot(q, k.to(q.dtype))
            elif DOT_MODE == 1:
                s = tl.dot(q, k.to(tl.float32), input_precision="ieee")
            else:  # interpreter with bf16: round to bf16 as the GPU would, multiply in fp32
                # (int8 -> bf16 casts give NaN in the interpreter: through float32, exact either way)
                s = tl.dot(
                    q.to(tl.float32),
                    k.to(tl.float32).to(q.dtype).to(tl.float32),
                    input_precision="ieee",
                )
            if QUANT != 0:
                s = s * (k_sc * qk_scale)[None, :]
            else:
                s = s * qk_scale
        if MASKED:
            s = tl.where(n[None, :] <= pos[:, None], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        p = tl.exp2(s - m_new[:, None])
        alpha = tl.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, 1)
        if QUANT != 0 and KV_CVT != 0:
            # sum_n p_n * v_scale_n * v_n = v_max * sum_n (p_n * v_scale_n / v_max) * v_n
            v_max = tl.max(v_sc, 0)
            v_max = tl.where(v_max > 0.0, v_max, 1.0)
            pw = p * (v_sc / v_max)[None, :]
            pv = _mma(_to_f16(pw, DOT_MODE), _kv_to_f16(v, DOT_MODE), DOT_MODE)
            acc = acc * alpha[:, None] + pv * v_max
        else:
            pw = p * v_sc[None, :] if QUANT != 0 else p
            if DOT_MODE == 0:
                pv = tl.dot(pw.to(q.dtype), v.to(q.dtype))
            elif DOT_MODE == 1:
                pv = tl.dot(pw, v.to(tl.float32), input_precision="ieee")
            else:
                pv = tl.dot(
                    pw.to(q.dtype).to(tl.float32),
                    v.to(tl.float32).to(q.dtype).to(tl.float32),
                    input_precision="ieee",
                )
            acc = acc * alpha[:, None] + pv
    return acc, l_i, m_new


@triton.jit
def _float_dot(a, b, DOT_MODE: tl.constexpr):
    """``a @ b`` for float32 ``b`` dequantized in registers: ``b`` rounded to ``a``'s dtype
    (bf16/fp16 products, fp32 accumulate), float32 IEEE for float32 ``a``; the interpreter
    with bf16 (``DOT_MODE`` 2): both rounded to bf16, multiplied in float32."""
    if DOT_MODE == 0:
        c = tl.dot(a, b.to(a.dtype))
    elif DOT_MODE == 1:
        c = tl.dot(a, b, input_precision="ieee")
    else:
        c = tl.dot(a.to(tl.float32), b.to(a.dtype).to(tl.float32), input_precision="ieee")
    return c


@triton.jit
def _to_f16(x, DOT_MODE: tl.constexpr):
    """float32 -> fp16 operand (the interpreter: fp16-rounded float32)."""
    if DOT_MODE == 0:
        y = x.to(tl.float16)
    else:
        y = x.to(tl.float16).to(tl.float32)
    return y


@triton.jit
def _mma(a, b, DOT_MODE: tl.constexpr):
    """``a @ b`` with a float32 accumulator: fp16 operands on the GPU, float32 (IEEE) in the
    interpreter."""
    if DOT_MODE == 0:
        c = tl.dot(a, b)
    else:
        c = tl.dot(a, b, input_precision="ieee")
    return c


@triton.jit
def _find_seq_of_token(cu_q_ptr, tok, num_seqs):
    """Largest ``i`` in ``[0, num_seqs)`` with ``cu_q[i] <= tok``: the sequence owning query
    token ``tok`` (sequences with no new tokens have ``cu_q[i] == cu_q[i + 1]``)."""
    lo = tl.full((), 0, tl.int32)
    hi = tl.full((), 0, tl.int32) + num_seqs - 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if tl.load(cu_q_ptr + mid) <= tok:
            lo = mid
        else:
            hi = mid - 1
    return lo


# num_seqs/num_segments vary from step to step: not specialised (no recompiles when they are 1
# or multiples of 16)
@triton.jit(do_not_specialize=["num_seqs", "num_segments"])
def paged_attention_kernel(
    out_ptr,
    seg_out_ptr,
    seg_max_ptr,
    seg_sum_ptr,
    q_ptr,
    qr_ptr,
    k_ptr,
    km_ptr,
    v_ptr,
    ks_ptr,
    vs_ptr,
    bt_ptr,
    cu_q_ptr,
    seq_lens_ptr,
    qk_scale,
    num_seqs,
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
    HEAD_DIM_PAD: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_Q: tl.constexpr,
    TILE_N: tl.constexpr,
    SPLIT: tl.constexpr,
    DOT_MODE: tl.constexpr,
    NUM_STAGES: tl.constexpr,
    QUANT: tl.constexpr,
    KV_CVT: tl.constexpr = 0,
    DECODE: tl.constexpr = False,
    V_TOKEN_MINOR: tl.constexpr = False,
    SCALE_TOKEN_MINOR: tl.constexpr = False,
    INT4_CVT: tl.constexpr = 0,
    INT4_FOLD: tl.constexpr = False,
):
    """One program per (block of query rows, KV head, split-K segment). Causal attention of
    ``BLOCK_Q`` new tokens x the ``G`` query heads sharing KV head ``program_id(1)`` over the
    sequence's paged context, reading each KV block once through the block table; with
    ``SPLIT`` it writes per-segment partial outputs, maxima and sums for
    ``_reduce_segments_kernel``. ``DECODE``: program ``program_id(0)`` is query token
    ``program_id(0)`` (``BLOCK_Q == 1``). ``INT4_CVT`` 1/2 (packed INT4 only): the split-half
    program of :func:`~local_engine.attention.triton_int4.int4_rows` with that operand
    conversion and ``INT4_FOLD``; 0 the nibble select over the whole head dim below.
    Launched by :func:`triton_backend.paged_attention`."""
    qb = tl.program_id(0)
    kvh = tl.program_id(1)
    seg = tl.program_id(2)

    if DECODE:
        # one token per program; sequence i = token i unless some sequence has != 1 token
        seq = qb
        q_start = tl.load(cu_q_ptr + qb)
        q_end = tl.load(cu_q_ptr + qb + 1, mask=qb < num_seqs, other=-1)
        # the common case's context length, loaded beside cu_q (not after it: one latency
        # less before the first block-table read)
        ctx = tl.load(seq_lens_ptr + qb, mask=qb < num_seqs, other=0)
        if (q_start != qb) | (q_end != qb + 1):
            seq = _find_seq_of_token(cu_q_ptr, qb, num_seqs)
            q_start = tl.load(cu_q_ptr + seq)
            q_end = tl.load(cu_q_ptr + seq + 1)
            ctx = tl.load(seq_lens_ptr + seq)
        q_len = q_end - q_start
        q_off = qb - q_start
    else:
        seq = _find_seq(cu_q_ptr, qb, num_seqs, BLOCK_Q)
        q_start = tl.load(cu_q_ptr + seq)
        q_len = tl.load(cu_q_ptr + seq + 1) - q_start
        q_off = (qb - (q_start // BLOCK_Q + seq)) * BLOCK_Q
        ctx = tl.load(seq_lens_ptr + seq)
    if QUANT == 3 and INT4_CVT != 0:
        if q_off < q_len:
            int4_rows(
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
                NUM_HEADS,
                G,
                HEAD_DIM,
                BLOCK_SIZE,
                BLOCK_M,
                BLOCK_Q,
                TILE_N,
                SPLIT,
                DOT_MODE,
                NUM_STAGES,
                V_TOKEN_MINOR,
                SCALE_TOKEN_MINOR,
                INT4_CVT,
                INT4_FOLD,
            )
    elif q_off < q_len:
        rows = tl.arange(0, BLOCK_M)
        q_idx = q_off + rows // G
        head = kvh * G + rows % G
        row_ok = (rows < BLOCK_Q * G) & (q_idx < q_len)
        pos = ctx - q_len + q_idx
        tok = (q_start + q_idx).to(tl.int64)
        offs_d = tl.arange(0, HEAD_DIM_PAD)
        q_mask = row_ok[:, None] & (offs_d < HEAD_DIM)[None, :]
        q = tl.load(
            q_ptr + tok[:, None] * stride_qt + head[:, None] * stride_qh + offs_d[None, :],
            mask=q_mask,
            other=0.0,
        )
        if QUANT != 0 and KV_CVT != 0:
            # fp16 products: each row scaled by 2**-e, 2**e >= its amax (exact for bf16 rows)
            q_f = q.to(tl.float32)
            q_amax = tl.max(tl.abs(q_f), 1)
            q_pow = tl.exp2(tl.ceil(tl.log2(tl.where(q_amax > 0.0, q_amax, 1.0))))
            q = _to_f16(q_f / q_pow[:, None], DOT_MODE)
            q_row_scale = q_pow * qk_scale
        else:
            q_row_scale = tl.zeros([BLOCK_M], tl.float32) + qk_scale  # unused
        q_rot = q  # (qr_ptr: unused)

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

        m_i = tl.full([BLOCK_M], NEG_BIG, tl.float32)
        l_i = tl.zeros([BLOCK_M], tl.float32)
        acc = tl.zeros([BLOCK_M, HEAD_DIM_PAD], tl.float32)
        bt_row = bt_ptr + seq.to(tl.int64) * stride_bt
        kv_head_off_k = kvh * stride_kh
        kv_head_off_v = kvh * stride_vh
        for t in tl.range(t_lo, tl.minimum(t_hi, n_full), num_stages=NUM_STAGES):
            acc, l_i, m_i = _attend_tile(
                acc,
                l_i,
                m_i,
                q,
                q_row_scale,
                q_rot,
                t,
                bt_row,
                k_ptr,
                km_ptr,
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
                offs_d,
                QUANT,
                KV_CVT,
                HEAD_DIM,
                HEAD_DIM_PAD,
                BLOCK_SIZE,
                TILE_N,
                False,
                DOT_MODE,
                V_TOKEN_MINOR,
                SCALE_TOKEN_MINOR,
            )
        for t in tl.range(tl.maximum(t_lo, n_full), t_hi):
            acc, l_i, m_i = _attend_tile(
                acc,
                l_i,
                m_i,
                q,
                q_row_scale,
                q_rot,
                t,
                bt_row,
                k_ptr,
                km_ptr,
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
                offs_d,
                QUANT,
                KV_CVT,
                HEAD_DIM,
                HEAD_DIM_PAD,
                BLOCK_SIZE,
                TILE_N,
                True,
                DOT_MODE,
                V_TOKEN_MINOR,
                SCALE_TOKEN_MINOR,
            )

        l_safe = tl.where(l_i == 0.0, 1.0, l_i)
        o = acc / l_safe[:, None]
        if SPLIT:
            # scratch [num_tokens, NUM_HEADS, num_segments, HEAD_DIM_PAD] (+ stats without the dim)
            stat = (tok * NUM_HEADS + head) * num_segments + seg
            tl.store(
                seg_out_ptr + stat[:, None] * HEAD_DIM_PAD + offs_d[None, :],
                o,
                mask=row_ok[:, None],
            )
            tl.store(seg_max_ptr + stat, m_i, mask=row_ok)
            tl.store(seg_sum_ptr + stat, l_i, mask=row_ok)
        else:
            tl.store(
                out_ptr + tok[:, None] * stride_ot + head[:, None] * stride_oh + offs_d[None, :],
                o.to(out_ptr.dtype.element_ty),
                mask=q_mask,
            )


@triton.jit
def _merge_row(
    dst_ptr,
    seg_out_ptr,
    seg_max_ptr,
    seg_sum_ptr,
    base,
    num_segments,
    HEAD_DIM: tl.constexpr,
    HEAD_DIM_PAD: tl.constexpr,
    SEG_CHUNK: tl.constexpr,
):
    """``dst[:HEAD_DIM]`` = the merge of one (token, head)'s split-K partial outputs ``o_s``
    (rows ``base .. base + num_segments`` of the scratch) with weights ``sum_s * 2^(max_s -
    max)``, in one pass over chunks of ``SEG_CHUNK`` segments (the launcher makes one chunk
    hold every segment when registers allow: one round of loads, no dependent second pass;
    more segments rescale the running sum per chunk, as the online softmax does). Loads
    bypass L1 (``.cg``): other programs wrote the scratch."""
    d = tl.arange(0, HEAD_DIM_PAD)
    m_run = tl.full((), NEG_BIG, tl.float32)
    acc = tl.zeros([HEAD_DIM_PAD], tl.float32)
    w_sum = tl.zeros((), tl.float32)
    for c in range(0, num_segments, SEG_CHUNK):
        s = c + tl.arange(0, SEG_CHUNK)
        s_ok = s < num_segments
        m = tl.load(seg_max_ptr + base + s, mask=s_ok, other=NEG_BIG, cache_modifier=".cg")
        seg_sum = tl.load(seg_sum_ptr + base + s, mask=s_ok, other=0.0, cache_modifier=".cg")
        o = tl.load(
            seg_out_ptr + (base + s)[:, None] * HEAD_DIM_PAD + d[None, :],
            mask=s_ok[:, None],
            other=0.0,
            cache_modifier=".cg",
        )
        m_new = tl.maximum(m_run, tl.max(m, 0))
        alpha = tl.exp2(m_run - m_new)
        w = seg_sum * tl.exp2(m - m_new)
        acc = acc * alpha + tl.sum(o * w[:, None], 0)
        w_sum = w_sum * alpha + tl.sum(w, 0)
        m_run = m_new
    res = acc / tl.where(w_sum == 0.0, 1.0, w_sum)
    tl.store(dst_ptr + d, res.to(dst_ptr.dtype.element_ty), mask=d < HEAD_DIM)


@triton.jit(do_not_specialize=["num_segments"])
def _reduce_segments_kernel(
    out_ptr,
    seg_out_ptr,
    seg_max_ptr,
    seg_sum_ptr,
    num_segments,
    stride_ot,
    stride_oh,
    NUM_HEADS: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    HEAD_DIM_PAD: tl.constexpr,
    SEG_CHUNK: tl.constexpr,
):
    """One program per (token, head): :func:`_merge_row` of its split-K partials."""
    t = tl.program_id(0).to(tl.int64)
    h = tl.program_id(1)
    _merge_row(
        out_ptr + t * stride_ot + h * stride_oh,
        seg_out_ptr,
        seg_max_ptr,
        seg_sum_ptr,
        (t * NUM_HEADS + h) * num_segments,
        num_segments,
        HEAD_DIM,
        HEAD_DIM_PAD,
        SEG_CHUNK,
    )
