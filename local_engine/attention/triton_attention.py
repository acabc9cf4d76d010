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

Quantized caches (``QUANT`` 1 = INT8, 2 = FP8 E4M3; :mod:`local_engine.kv_cache.quant`): K/V
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
    k_off = blk * stride_kb + slot_in_blk * stride_kt + kv_head_off_k  # [TILE_N]
    v_off = blk * stride_vb + slot_in_blk * stride_vt + kv_head_off_v
    # K^T tile [HEAD_DIM_PAD, TILE_N], V tile [TILE_N, HEAD_DIM_PAD]
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
    k_ptr,
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
):
    """One program per (block of query rows, KV head, split-K segment). Causal attention of
    ``BLOCK_Q`` new tokens x the ``G`` query heads sharing KV head ``program_id(1)`` over the
    sequence's paged context, reading each KV block once through the block table; with
    ``SPLIT`` it writes per-segment partial outputs, maxima and sums for
    ``_reduce_segments_kernel``. ``DECODE``: program ``program_id(0)`` is query token
    ``program_id(0)`` (``BLOCK_Q == 1``). Launched by :func:`triton_backend.paged_attention`."""
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
    if q_off < q_len:
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


# ----------------------------------------------------------------------------- group decode
# 1-byte (INT8 / FP8) decode whose work and registers scale with the GQA group ``G`` instead
# of a 16-row MMA tile (issue 12, session 3b): one program per (token, KV head, segment) holds
# its ``GP = next_pow2(G)`` query rows; ``GROUP_MODE`` 0 = CUDA-core dot products in float32
# (broadcast-multiply + tl.sum over the head dim for the scores, over the keys for P @ V),
# 1 = ``tl.dot`` with the keys on the MMA's M side (``K [TILE_N, D] @ Q^T [D, GN]``, the group
# padded to ``GN = max(16, GP)`` only on N; ``V^T [D, TILE_N] @ P^T [TILE_N, GN]``).


@triton.jit
def _int8_to_f32(x, CVT_MAGIC: tl.constexpr):
    """INT8 values -> float32 (exact). ``CVT_MAGIC``: by the bits of 2**23 + 128 + x, i.e.
    ``bitcast((x ^ 0x80) | 0x4B000000) - 8388736.0`` on the zero-extended byte (an integer
    LOP3 and an FADD per value instead of an ``I2F``); else ``x.to(float32)``."""
    if CVT_MAGIC:
        u = x.to(tl.uint8, bitcast=True).to(tl.int32)
        y = ((u ^ 0x80) | 0x4B000000).to(tl.float32, bitcast=True) - 8388736.0
    else:
        y = x.to(tl.float32)
    return y


@triton.jit
def _kv_to_f32(x, QUANT: tl.constexpr, CVT_MAGIC: tl.constexpr):
    if QUANT == 1:
        y = _int8_to_f32(x, CVT_MAGIC)
    else:
        y = x.to(tl.float32)
    return y


@triton.jit
def _group_tile(
    acc,
    l_i,
    m_i,
    q,
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
    offs_d,
    QUANT: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    HEAD_DIM_PAD: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
    TILE_N: tl.constexpr,
    MASKED: tl.constexpr,
    V_TOKEN_MINOR: tl.constexpr,
    SCALE_TOKEN_MINOR: tl.constexpr,
    GROUP_MODE: tl.constexpr,
    CVT_MAGIC: tl.constexpr,
    DOT_MODE: tl.constexpr,
):
    """One key tile of :func:`paged_decode_group_kernel`. Mode 0: ``acc [GP, D]``, ``l_i`` /
    ``m_i [GP]``, ``q [GP, D]`` float32 (times ``qk_scale``). Mode 1: transposed, ``acc [D,
    GN]``, ``l_i`` / ``m_i [GN]``, ``q`` = Q^T ``[D, GN]`` in the MMA dtype (unscaled)."""
    n = t * TILE_N + tl.arange(0, TILE_N)
    if MASKED:
        n_ok = n < ctx
        if V_TOKEN_MINOR:
            n_ok = (n // BLOCK_SIZE) * BLOCK_SIZE < ctx  # whole blocks (see _attend_tile)
        blk = tl.load(bt_row + n // BLOCK_SIZE, mask=n_ok, other=0).to(tl.int64)
    else:
        blk = tl.load(bt_row + n // BLOCK_SIZE).to(tl.int64)
    slot_in_blk = n % BLOCK_SIZE
    k_off = blk * stride_kb + slot_in_blk * stride_kt + kv_head_off_k  # [TILE_N]
    v_off = blk * stride_vb + slot_in_blk * stride_vt + kv_head_off_v
    # K tile [TILE_N, D] (head dim contiguous), V^T tile [D, TILE_N] (keys contiguous in the
    # V-token-minor layout)
    k_idx = k_off[:, None] + offs_d[None, :]
    v_idx = v_off[None, :] + offs_d[:, None] * stride_vd
    if V_TOKEN_MINOR:
        v_idx = tl.max_contiguous(tl.multiple_of(v_idx, [1, BLOCK_SIZE]), [1, BLOCK_SIZE])
    d_ok = offs_d < HEAD_DIM
    if MASKED:
        k = tl.load(k_ptr + k_idx, mask=n_ok[:, None] & d_ok[None, :], other=0.0)
        v = tl.load(v_ptr + v_idx, mask=d_ok[:, None] & n_ok[None, :], other=0.0)
    elif HEAD_DIM_PAD == HEAD_DIM:
        k = tl.load(k_ptr + k_idx)
        v = tl.load(v_ptr + v_idx)
    else:
        k = tl.load(k_ptr + k_idx, mask=d_ok[None, :], other=0.0)
        v = tl.load(v_ptr + v_idx, mask=d_ok[:, None], other=0.0)
    s_off = blk * stride_sb + slot_in_blk * stride_st + kvh * stride_sh
    if SCALE_TOKEN_MINOR:
        s_off = tl.max_contiguous(tl.multiple_of(s_off, BLOCK_SIZE), BLOCK_SIZE)
    if MASKED:
        k_sc = tl.load(ks_ptr + s_off, mask=n_ok, other=0.0)
        v_sc = tl.load(vs_ptr + s_off, mask=n_ok, other=0.0)
    else:
        k_sc = tl.load(ks_ptr + s_off)
        v_sc = tl.load(vs_ptr + s_off)
    if GROUP_MODE == 0:
        kf = _kv_to_f32(k, QUANT, CVT_MAGIC)
        vf = _kv_to_f32(v, QUANT, CVT_MAGIC)
        if MASKED:
            # keys past ctx in the last block were read whole: no NaN byte or scale may reach
            # P @ V (0 * NaN); their scores are masked below
            vf = tl.where((n < ctx)[None, :], vf, 0.0)
            v_sc = tl.where(n < ctx, v_sc, 0.0)
        # s[g, n] = sum_d q[g, d] k[n, d], then K's per-token scale on the score column
        s = tl.sum(q[:, None, :] * kf[None, :, :], 2) * k_sc[None, :]
        if MASKED:
            s = tl.where(n[None, :] <= pos, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        p = tl.exp2(s - m_new[:, None])
        alpha = tl.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, 1)
        pw = p * v_sc[None, :]  # V's scale folded into the probabilities
        # o[g, d] += sum_n pw[g, n] v[n, d]  (V^T tile: keys on the last axis)
        acc = acc * alpha[:, None] + tl.sum(pw[:, None, :] * vf[None, :, :], 2)
    else:
        if MASKED:
            v = tl.where((n < ctx)[None, :], v, tl.zeros_like(v))
            v_sc = tl.where(n < ctx, v_sc, 0.0)
        if DOT_MODE == 0:
            st = tl.dot(k.to(q.dtype), q)  # [TILE_N, GN]
        else:  # the interpreter: operands rounded to the MMA dtype, products in float32
            st = tl.dot(
                k.to(tl.float32).to(q.dtype).to(tl.float32),
                q.to(tl.float32),
                input_precision="ieee",
            )
        st = st * (k_sc * qk_scale)[:, None]
        if MASKED:
            st = tl.where(n[:, None] <= pos, st, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(st, 0))
        p = tl.exp2(st - m_new[None, :])
        alpha = tl.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, 0)
        pw = p * v_sc[:, None]
        if DOT_MODE == 0:
            pv = tl.dot(v.to(q.dtype), pw.to(q.dtype))  # [D, GN]
        else:
            pv = tl.dot(
                v.to(tl.float32).to(q.dtype).to(tl.float32),
                pw.to(q.dtype).to(tl.float32),
                input_precision="ieee",
            )
        acc = acc * alpha[None, :] + pv
    return acc, l_i, m_new


@triton.jit
def _group_tile_split(
    acc,
    l_i,
    m_i,
    q3,
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
    stride_kb,
    stride_kt,
    stride_vb,
    stride_vt,
    stride_sb,
    stride_st,
    stride_vd,
    stride_sh,
    QUANT: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    HEAD_DIM_PAD: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
    TILE_N: tl.constexpr,
    GP: tl.constexpr,
    MASKED: tl.constexpr,
    V_TOKEN_MINOR: tl.constexpr,
    SCALE_TOKEN_MINOR: tl.constexpr,
    CVT_MAGIC: tl.constexpr,
):
    """Mode 2 of :func:`paged_decode_group_kernel`: mode 0's float32 dot products with each
    reduced axis split as ``outer x 16`` and the 16 contiguous bytes leading (the K tile as
    ``[16, TILE_N, D / 16]`` with ``d = d1 * 16 + d2``, V^T as ``[16, D, TILE_N / 16]`` with
    ``n = n1 * 16 + n2``), so each thread's vector load is reduced in registers before any
    shuffle. ``q3 [16, GP, D / 16]`` float32 (times ``qk_scale``); ``acc [GP, D]``."""
    D2: tl.constexpr = 16
    D1: tl.constexpr = HEAD_DIM_PAD // 16
    N2: tl.constexpr = 16
    N1: tl.constexpr = TILE_N // 16
    n = t * TILE_N + tl.arange(0, TILE_N)
    d2 = tl.arange(0, D2)
    d1 = tl.arange(0, D1)
    d3 = d1[None, None, :] * D2 + d2[:, None, None]  # [D2, 1, D1]
    # keys' blocks, [TILE_N] for K and [N2, N1] for V (n = n1 * N2 + n2)
    nv = t * TILE_N + tl.arange(0, N1)[None, :] * N2 + tl.arange(0, N2)[:, None]
    if MASKED:
        n_ok = n < ctx
        nv_ok = nv < ctx
        if V_TOKEN_MINOR:
            n_ok = (n // BLOCK_SIZE) * BLOCK_SIZE < ctx
            nv_ok = (nv // BLOCK_SIZE) * BLOCK_SIZE < ctx
        blk = tl.load(bt_row + n // BLOCK_SIZE, mask=n_ok, other=0).to(tl.int64)
        blk_v = tl.load(bt_row + nv // BLOCK_SIZE, mask=nv_ok, other=0).to(tl.int64)
    else:
        blk = tl.load(bt_row + n // BLOCK_SIZE).to(tl.int64)
        blk_v = tl.load(bt_row + nv // BLOCK_SIZE).to(tl.int64)
    k_off = blk * stride_kb + (n % BLOCK_SIZE) * stride_kt + kv_head_off_k  # [TILE_N]
    v_off = blk_v * stride_vb + (nv % BLOCK_SIZE) * stride_vt + kv_head_off_v  # [N2, N1]
    k_idx = k_off[None, :, None] + d3  # [D2, TILE_N, D1]
    dv = tl.arange(0, HEAD_DIM_PAD)
    v_idx = v_off[:, None, :] + dv[None, :, None] * stride_vd  # [N2, D, N1]
    if V_TOKEN_MINOR:
        v_idx = tl.max_contiguous(tl.multiple_of(v_idx, [BLOCK_SIZE, 1, 1]), [BLOCK_SIZE, 1, 1])
    kd_ok = d3 < HEAD_DIM
    vd_ok = (dv < HEAD_DIM)[None, :, None]
    if MASKED:
        k = tl.load(k_ptr + k_idx, mask=n_ok[None, :, None] & kd_ok, other=0.0)
        v = tl.load(v_ptr + v_idx, mask=nv_ok[:, None, :] & vd_ok, other=0.0)
    elif HEAD_DIM_PAD == HEAD_DIM:
        k = tl.load(k_ptr + k_idx)
        v = tl.load(v_ptr + v_idx)
    else:
        k = tl.load(k_ptr + k_idx, mask=kd_ok, other=0.0)
        v = tl.load(v_ptr + v_idx, mask=vd_ok, other=0.0)
    s_off = blk * stride_sb + (n % BLOCK_SIZE) * stride_st + kvh * stride_sh
    if SCALE_TOKEN_MINOR:
        s_off = tl.max_contiguous(tl.multiple_of(s_off, BLOCK_SIZE), BLOCK_SIZE)
    if MASKED:
        k_sc = tl.load(ks_ptr + s_off, mask=n_ok, other=0.0)
        v_sc = tl.load(vs_ptr + s_off, mask=n_ok, other=0.0)
    else:
        k_sc = tl.load(ks_ptr + s_off)
        v_sc = tl.load(vs_ptr + s_off)
    kf = _kv_to_f32(k, QUANT, CVT_MAGIC)
    vf = _kv_to_f32(v, QUANT, CVT_MAGIC)
    if MASKED:
        vf = tl.where((nv < ctx)[:, None, :], vf, 0.0)  # no NaN byte past ctx into P @ V
        v_sc = tl.where(n < ctx, v_sc, 0.0)
    # s[g, n] = sum_{d2, d1} q[d2, g, d1] k[d2, n, d1]
    prod = q3[:, :, None, :] * kf[:, None, :, :]  # [D2, GP, TILE_N, D1]
    s = tl.sum(tl.sum(prod, 0), 2) * k_sc[None, :]
    if MASKED:
        s = tl.where(n[None, :] <= pos, s, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(s, 1))
    p = tl.exp2(s - m_new[:, None])
    alpha = tl.exp2(m_i - m_new)
    l_i = l_i * alpha + tl.sum(p, 1)
    pw = p * v_sc[None, :]
    pw3 = tl.permute(tl.reshape(pw, [GP, N1, N2]), (2, 0, 1))  # [N2, GP, N1]
    pv = tl.sum(tl.sum(pw3[:, :, None, :] * vf[:, None, :, :], 0), 2)  # [GP, D]
    acc = acc * alpha[:, None] + pv
    return acc, l_i, m_new


@triton.jit(do_not_specialize=["num_seqs", "num_segments"])
def paged_decode_group_kernel(
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
    GP: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    HEAD_DIM_PAD: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
    TILE_N: tl.constexpr,
    SPLIT: tl.constexpr,
    NUM_STAGES: tl.constexpr,
    QUANT: tl.constexpr,
    GROUP_MODE: tl.constexpr,
    CVT_MAGIC: tl.constexpr,
    DOT_MODE: tl.constexpr,
    V_TOKEN_MINOR: tl.constexpr = False,
    SCALE_TOKEN_MINOR: tl.constexpr = False,
):
    """Decode over a 1-byte (INT8 ``QUANT`` 1 / FP8 E4M3 ``QUANT`` 2) paged cache, one program
    per (query token ``program_id(0)``, KV head, split-K segment), the ``G`` query heads of the
    KV head as ``GP = next_pow2(G)`` rows (mode 0) or ``GP`` (at least 16) MMA columns (mode
    1). Causal: the token attends to keys ``<= ctx - q_len + its offset`` (any
    ``cu_seqlens_q``; the common one-token-per-sequence case needs no search). Outputs and the
    split-K scratch as :func:`paged_attention_kernel` (merged by ``_reduce_segments_kernel``).
    Launched by :func:`triton_backend.paged_attention` for decode-shaped calls over 1-byte
    caches when its ``decode_kernel`` is ``"group"`` / ``"group_dot"``."""
    qb = tl.program_id(0)
    kvh = tl.program_id(1)
    seg = tl.program_id(2)
    seq = qb
    q_start = tl.load(cu_q_ptr + qb)
    q_end = tl.load(cu_q_ptr + qb + 1, mask=qb < num_seqs, other=-1)
    ctx = tl.load(seq_lens_ptr + qb, mask=qb < num_seqs, other=0)
    if (q_start != qb) | (q_end != qb + 1):
        seq = _find_seq_of_token(cu_q_ptr, qb, num_seqs)
        q_start = tl.load(cu_q_ptr + seq)
        q_end = tl.load(cu_q_ptr + seq + 1)
        ctx = tl.load(seq_lens_ptr + seq)
    q_len = q_end - q_start
    pos = ctx - q_len + (qb - q_start)  # this token's position: keys 0 .. pos
    tok = qb.to(tl.int64)
    offs_d = tl.arange(0, HEAD_DIM_PAD)
    d_ok = offs_d < HEAD_DIM
    n_tiles = tl.cdiv(pos + 1, TILE_N)
    n_full = (pos + 1) // TILE_N
    if SPLIT:
        per_seg = tl.cdiv(tl.cdiv(ctx, TILE_N), num_segments)
        t_lo = seg * per_seg
        t_hi = tl.minimum(t_lo + per_seg, n_tiles)
    else:
        t_lo = 0
        t_hi = n_tiles
    bt_row = bt_ptr + seq.to(tl.int64) * stride_bt
    kv_head_off_k = kvh * stride_kh
    kv_head_off_v = kvh * stride_vh
    g = tl.arange(0, GP)
    g_ok = g < G
    head = kvh * G + g
    if GROUP_MODE == 2:
        q_d3 = (
            tl.arange(0, HEAD_DIM_PAD // 16)[None, None, :] * 16 + tl.arange(0, 16)[:, None, None]
        )
        q = tl.load(
            q_ptr + tok * stride_qt + head[None, :, None] * stride_qh + q_d3,
            mask=g_ok[None, :, None] & (q_d3 < HEAD_DIM),
            other=0.0,
        ).to(tl.float32)  # [16, GP, D / 16]
        q = q * qk_scale
        acc = tl.zeros([GP, HEAD_DIM_PAD], tl.float32)
    elif GROUP_MODE == 0:
        q = tl.load(
            q_ptr + tok * stride_qt + head[:, None] * stride_qh + offs_d[None, :],
            mask=g_ok[:, None] & d_ok[None, :],
            other=0.0,
        ).to(tl.float32)
        q = q * qk_scale
        acc = tl.zeros([GP, HEAD_DIM_PAD], tl.float32)
    else:
        # Q^T [D, GP] in the MMA dtype; qk_scale multiplies the score rows with K's scales
        q = tl.load(
            q_ptr + tok * stride_qt + head[None, :] * stride_qh + offs_d[:, None],
            mask=g_ok[None, :] & d_ok[:, None],
            other=0.0,
        )
        if DOT_MODE == 1:
            q = q.to(tl.float32)
        acc = tl.zeros([HEAD_DIM_PAD, GP], tl.float32)
    m_i = tl.full([GP], NEG_BIG, tl.float32)
    l_i = tl.zeros([GP], tl.float32)
    if GROUP_MODE == 2:
        for t in tl.range(t_lo, tl.minimum(t_hi, n_full), num_stages=NUM_STAGES):
            acc, l_i, m_i = _group_tile_split(
                acc, l_i, m_i, q, t, bt_row, k_ptr, v_ptr, ks_ptr, vs_ptr, kv_head_off_k,
                kv_head_off_v, kvh, ctx, pos, stride_kb, stride_kt, stride_vb, stride_vt,
                stride_sb, stride_st, stride_vd, stride_sh, QUANT, HEAD_DIM, HEAD_DIM_PAD,
                BLOCK_SIZE, TILE_N, GP, False, V_TOKEN_MINOR, SCALE_TOKEN_MINOR, CVT_MAGIC,
            )  # fmt: skip
        for t in tl.range(tl.maximum(t_lo, n_full), t_hi):
            acc, l_i, m_i = _group_tile_split(
                acc, l_i, m_i, q, t, bt_row, k_ptr, v_ptr, ks_ptr, vs_ptr, kv_head_off_k,
                kv_head_off_v, kvh, ctx, pos, stride_kb, stride_kt, stride_vb, stride_vt,
                stride_sb, stride_st, stride_vd, stride_sh, QUANT, HEAD_DIM, HEAD_DIM_PAD,
                BLOCK_SIZE, TILE_N, GP, True, V_TOKEN_MINOR, SCALE_TOKEN_MINOR, CVT_MAGIC,
            )  # fmt: skip
    else:
        for t in tl.range(t_lo, tl.minimum(t_hi, n_full), num_stages=NUM_STAGES):
            acc, l_i, m_i = _group_tile(
                acc, l_i, m_i, q, t, bt_row, k_ptr, v_ptr, ks_ptr, vs_ptr, kv_head_off_k,
                kv_head_off_v, kvh, ctx, pos, qk_scale, stride_kb, stride_kt, stride_vb, stride_vt,
                stride_sb, stride_st, stride_vd, stride_sh, offs_d, QUANT, HEAD_DIM,
                HEAD_DIM_PAD, BLOCK_SIZE, TILE_N, False, V_TOKEN_MINOR, SCALE_TOKEN_MINOR,
                GROUP_MODE, CVT_MAGIC, DOT_MODE,
            )  # fmt: skip
        for t in tl.range(tl.maximum(t_lo, n_full), t_hi):
            acc, l_i, m_i = _group_tile(
                acc, l_i, m_i, q, t, bt_row, k_ptr, v_ptr, ks_ptr, vs_ptr, kv_head_off_k,
                kv_head_off_v, kvh, ctx, pos, qk_scale, stride_kb, stride_kt, stride_vb, stride_vt,
                stride_sb, stride_st, stride_vd, stride_sh, offs_d, QUANT, HEAD_DIM,
                HEAD_DIM_PAD, BLOCK_SIZE, TILE_N, True, V_TOKEN_MINOR, SCALE_TOKEN_MINOR,
                GROUP_MODE, CVT_MAGIC, DOT_MODE,
            )  # fmt: skip
    l_safe = tl.where(l_i == 0.0, 1.0, l_i)
    if GROUP_MODE != 1:
        o = acc / l_safe[:, None]  # [GP, D]
        o_idx = offs_d[None, :]
        h2 = head[:, None]
        mask2 = g_ok[:, None] & d_ok[None, :]
    else:
        o = acc / l_safe[None, :]  # [D, GP]
        o_idx = offs_d[:, None]
        h2 = head[None, :]
        mask2 = g_ok[None, :] & d_ok[:, None]
    if SPLIT:
        stat = (tok * NUM_HEADS + head) * num_segments + seg
        if GROUP_MODE != 1:
            st2 = stat[:, None]
        else:
            st2 = stat[None, :]
        tl.store(seg_out_ptr + st2 * HEAD_DIM_PAD + o_idx, o, mask=mask2)
        tl.store(seg_max_ptr + stat, m_i, mask=g_ok)
        tl.store(seg_sum_ptr + stat, l_i, mask=g_ok)
    else:
        tl.store(
            out_ptr + tok * stride_ot + h2 * stride_oh + o_idx,
            o.to(out_ptr.dtype.element_ty),
            mask=mask2,
        )
