// Paged decode attention over a 1-byte (INT8 / FP8 E4M3) or 16-bit (bf16 / fp16) KV cache: CUDA
// C++ with tensor-core MMAs (mma.sync m16n8k16, float32 accumulators), for sm_80 and newer
// (FP8 conversions in hardware from sm_89; local_engine/attention/cuda_decode.py refuses FP8
// below that).
//
// Why a hand-written kernel (bench/RESULTS.md, "## kvquant", sessions 2-3b): the Triton decode
// tile for a GQA group of G query heads is a 16-row MMA tile (the group padded to 16 rows) at
// ~250 registers a thread, and no Triton-level variant got past ~3 TB/s of 1-byte data (1.3x
// the bf16 kernel's speed; 2x is the limit). Here the keys are the MMA's M side and the group
// its N side (n8: up to 8 query heads, no padding to 16), and every layout is chosen by hand:
//
//   S^T [16 keys, 8 heads] = K [16 keys, 16 d] . Q^T [16 d, 8 heads]          (per k-step)
//   O^T [16 d, 8 heads]   += V^T [16 d, 16 keys] . P^T [16 keys, 8 heads]      (per d-tile)
//
// * K rows and V^T rows are the A operands, converted from bytes in registers. The sum axes
//   (d for S, keys for O) are permuted so that each thread's A values come from contiguous
//   bytes: thread (r = lane / 4, c = lane % 4) owns d in [16 (c + 4e), 16 (c + 4e) + 16) of a K
//   row (e < D / 64) and 4 * STEPS consecutive keys of a V^T row; Q^T (B operand, loaded once)
//   is permuted the same way. Key slot s of MMA step t is key 4 STEPS (s % 8 / 2) + 4 t + s % 2
//   (+ 2 for s >= 8) of the tile, the same map on both sides.
// * P^T for the second product is the first product's accumulator, scaled and packed to fp16,
//   and transposed in registers by `movmatrix` (no shared-memory round trip).
// * INT8 -> fp16: the fp16 with bits 0x6400 | (x ^ 0x80) is 1152 + x (exact), so one XOR per
//   4 bytes and one PRMT per 2 values build an operand. K keeps the bias: S -= 1152 sum_d q_d
//   (one MMA per program; the sum runs over head_dim only, so its rounding stays bounded). V
//   subtracts it (one HSUB2 per 2 values, exact): removing 1152 sum_n p_n after a whole
//   context's accumulation loses digits (relative error 2e-2 .. 8e-2 at 32k keys, run 1).
//   FP8 E4M3 -> fp16 is one `cvt.rn.f16x2.e4m3x2` per 2 values (exact).
// * Queries in fp16, each head's row scaled by 2^-e with 2^e >= its amax (exact for bf16
//   queries), 2^e returns in the score scale; each key's float32 scale multiplies its score,
//   each value's scale its probability, times a per-warp power of two that keeps P' <= 1 in
//   fp16 (raised like a running max when a later tile holds larger scales).
// * Each warp streams its own tiles of TILE = 16 STEPS keys (STEPS blocks of 16 tokens) through
//   a STAGES-deep cp.async pipeline in its own shared memory (no block-wide barrier in the
//   loop); warps of a CTA take interleaved tiles of the CTA's key segment and merge their
//   (max, sum, output) in shared memory at the end; CTAs of one (token, KV head) split the
//   context into `num_segments` segments (flash-decoding), merged by the Triton merge kernel.
//
// Cache layout (local_engine/kv_cache/quant.py, "v_token_minor"): per block, K values
// [block_size, kv_heads, head_dim] (any block / token / head strides, multiples of 16 bytes),
// V values [kv_heads, head_dim, block_size] (the block's 16 keys of one channel contiguous),
// float32 scales [kv_heads, block_size]. block_size must be 16.
//
// Shared-memory swizzles (bank-conflict-free 16-byte reads): K rows of 128 bytes store chunk
// j of row R at j ^ (4 (R & 1)); V^T rows of block b (16 bytes each) store row d at
// d ^ swz(b) with swz = 2b (STEPS 4) or 4b (STEPS 2).
//
// 16-bit caches (KIND == KV_16, the model dtype, token-major K and V): the same products in
// the queries' dtype, key slot s of step t is tile key 16 t + s (no permutation), K by
// `ldmatrix` and V^T by `ldmatrix.trans` from rows whose 16-byte chunk j of row R sits at
// j ^ (R & 7); rows past the context are zero-filled by the copies (a stale slot may hold
// NaN, and 0 * NaN would reach the output); no scales, no normaliser.

#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <stdint.h>

#include <type_traits>

namespace decode1b {

constexpr int BS = 16;                // tokens per KV block
constexpr float NEG_BIG = -1.0e30f;   // the running max before any key (as the Triton kernel)
constexpr int GP = 8;                 // query heads per KV head the kernel holds (MMA n8)

struct Params {
  void* out;        // [num_tokens, num_heads, D], q's dtype
  float* seg_out;   // [num_tokens, num_heads, num_segments, D] (split only)
  float* seg_max;   // [num_tokens, num_heads, num_segments]
  float* seg_sum;
  const void* q;    // [num_tokens, num_heads, D], bf16 or fp16
  const uint8_t* k;
  const uint8_t* v;
  const float* ks;
  const float* vs;
  const int* bt;    // [num_seqs, max_blocks]
  const int* cu_q;  // [num_seqs + 1]
  const int* seq_lens;
  float qk_scale;   // softmax scale * log2(e)
  int num_seqs, num_segments, num_heads, group;
  int64_t stride_qt, stride_qh, stride_ot, stride_oh;
  int64_t stride_kb, stride_kt, stride_kh;  // bytes
  int64_t stride_vb, stride_vh;             // bytes; 1-byte: token stride 1, channel 16
  int64_t stride_vt;                        // bytes; 16-bit V (token-major) only
  int64_t stride_sb, stride_sh;             // floats (token stride 1), both scale arrays
  int64_t stride_bt;
  int max_blocks;  // block_tables.shape[1]
};

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, bool pred) {
  // pred false: 16 zero bytes, nothing read
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
               "r"(pred ? 16 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

__device__ __forceinline__ void mma16816(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                         uint32_t a3, uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// bf16 operands (a 16-bit cache of bfloat16)
__device__ __forceinline__ void mma16816_bf16(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                              uint32_t a3, uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

template <typename QT>
__device__ __forceinline__ void mma16816_t(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                           uint32_t b1) {
  if constexpr (sizeof(QT) == 2 && std::is_same<QT, __nv_bfloat16>::value)
    mma16816_bf16(d, a[0], a[1], a[2], a[3], b0, b1);
  else
    mma16816(d, a[0], a[1], a[2], a[3], b0, b1);
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&a)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(a[0]), "=r"(a[1]), "=r"(a[2]), "=r"(a[3])
               : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&a)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(a[0]), "=r"(a[1]), "=r"(a[2]), "=r"(a[3])
               : "r"(addr));
}

__device__ __forceinline__ uint32_t movmatrix_t(uint32_t x) {
  uint32_t y;
  asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;\n" : "=r"(y) : "r"(x));
  return y;
}

__device__ __forceinline__ uint32_t prmt(uint32_t a, uint32_t b, uint32_t sel) {
  uint32_t d;
  asm("prmt.b32 %0, %1, %2, %3;\n" : "=r"(d) : "r"(a), "r"(b), "r"(sel));
  return d;
}

__device__ __forceinline__ float ex2(float x) {  // 2^x (MUFU.EX2; -inf -> 0)
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

__device__ __forceinline__ uint32_t pack_half2(float lo, float hi) {
  __half2 h = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&h);
}

template <typename QT>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {  // two QT in one register
  if constexpr (std::is_same<QT, __nv_bfloat16>::value) {
    __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&h);
  } else {
    return pack_half2(lo, hi);
  }
}

// 4 stored bytes (b0 lowest) -> two fp16x2 operand registers: lo = (b0, b1), hi = (b2, b3).
// INT8 (FP8 false): the word must already be XORed with 0x80808080; values are 1152 + x.
template <bool FP8>
__device__ __forceinline__ void cvt4(uint32_t w, uint32_t& lo, uint32_t& hi) {
  if constexpr (FP8) {
    __half2_raw l = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(w & 0xFFFFu),
                                               __NV_E4M3);
    __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(w >> 16),
                                               __NV_E4M3);
    lo = static_cast<uint32_t>(l.x) | (static_cast<uint32_t>(l.y) << 16);
    hi = static_cast<uint32_t>(h.x) | (static_cast<uint32_t>(h.y) << 16);
  } else {
    lo = prmt(w, 0x64646464u, 0x4140u);
    hi = prmt(w, 0x64646464u, 0x4342u);
  }
}

constexpr uint32_t HALF2_1152 = 0x64806480u;  // fp16 1152.0 in both halves

__device__ __forceinline__ uint32_t hsub2_1152(uint32_t x) {  // (1152 + v) - 1152 = v, exact
  uint32_t y;
  asm("sub.rn.f16x2 %0, %1, %2;\n" : "=r"(y) : "r"(x), "r"(HALF2_1152));
  return y;
}

template <int N>
struct Bytes;  // N bytes of a V^T row chunk, as 32-bit words
template <>
struct Bytes<4> {
  uint32_t w[1];
};
template <>
struct Bytes<8> {
  uint32_t w[2];
};
template <>
struct Bytes<16> {
  uint32_t w[4];
};

template <int N>
__device__ __forceinline__ Bytes<N> lds(const uint8_t* p) {
  Bytes<N> b;
  if constexpr (N == 16) {
    uint4 x = *reinterpret_cast<const uint4*>(p);
    b.w[0] = x.x, b.w[1] = x.y, b.w[2] = x.z, b.w[3] = x.w;
  } else if constexpr (N == 8) {
    uint2 x = *reinterpret_cast<const uint2*>(p);
    b.w[0] = x.x, b.w[1] = x.y;
  } else {
    b.w[0] = *reinterpret_cast<const uint32_t*>(p);
  }
  return b;
}

// explicit conversions (torch's extension build defines __CUDA_NO_HALF_CONVERSIONS__ and
// __CUDA_NO_BFLOAT16_CONVERSIONS__, so the types' implicit ones are off)
template <typename QT>
__device__ __forceinline__ float to_f32(QT x) {
  if constexpr (std::is_same<QT, __nv_bfloat16>::value)
    return __bfloat162float(x);
  else
    return __half2float(x);
}
template <typename QT>
__device__ __forceinline__ QT from_f32(float x) {
  if constexpr (std::is_same<QT, __nv_bfloat16>::value)
    return __float2bfloat16_rn(x);
  else
    return __float2half_rn(x);
}

// KV kinds: 1-byte INT8 / FP8 E4M3 (with per-token-head float32 scales), or 16-bit (the model
// dtype: bf16 / fp16, the same type as the queries)
constexpr int KV_INT8 = 0, KV_FP8 = 1, KV_16 = 2;

template <int D, int STEPS, int KIND>
struct Smem {
  static constexpr int EB = KIND == KV_16 ? 2 : 1;  // bytes per stored value
  static constexpr int TILE = 16 * STEPS;
  static constexpr int K_BYTES = TILE * D * EB;
  static constexpr int V_BYTES = TILE * D * EB;
  static constexpr int S_BYTES = KIND == KV_16 ? 0 : 2 * TILE * 4;
  static constexpr int STAGE = K_BYTES + V_BYTES + S_BYTES;
};

// Largest i in [0, num_seqs) with cu_q[i] <= tok: the sequence owning query token tok.
__device__ __forceinline__ int find_seq(const int* cu_q, int tok, int num_seqs) {
  int lo = 0, hi = num_seqs - 1;
  while (lo < hi) {
    int mid = (lo + hi + 1) / 2;
    if (__ldg(cu_q + mid) <= tok)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

template <int D, int STEPS, int WARPS, int STAGES, int KIND, typename QT>
__global__ void __launch_bounds__(WARPS * 32)
    decode_1b_kernel(const Params p) {
  constexpr bool FP8 = KIND == KV_FP8;
  constexpr bool Q8 = KIND != KV_16;  // 1-byte values with scales
  using SM = Smem<D, STEPS, KIND>;
  constexpr int TILE = SM::TILE;
  constexpr int KSTEPS = D / 16;        // MMA k-steps over the head dim
  constexpr int CPT = D / 64;           // 16-byte chunks of a K row per thread
  constexpr int NCH = D / 16;           // 16-byte chunks of a K row
  constexpr int VB = 4 * STEPS;         // bytes of a V^T row chunk per thread
  constexpr int SCH = 8 * STEPS;        // scale chunks per tile (K and V, 4 per block)
  static_assert(D == 64 || D == 128, "head_dim 64 or 128");
  static_assert(STEPS == 2 || STEPS == 4 || (!Q8 && STEPS == 1), "STEPS 2 or 4 (or 1: 16-bit)");
  constexpr int NCH16 = 2 * D / 16;  // 16-bit: 16-byte chunks of a K / V row
  constexpr int ROW16 = 2 * D;       // 16-bit: bytes of a K / V row

  // The only shared memory: a static __shared__ array would come first and move this one off
  // its 1 KiB-aligned start (session 5: a 16-byte offset made the rule's launches 3-20%
  // slower on the H200, bench/RESULTS.md "## kvquant"; test_cuda_decode checks the source).
  extern __shared__ __align__(16) uint8_t smem[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int r = lane >> 2, c = lane & 3;
  const int tok = blockIdx.x, kvh = blockIdx.y, seg = blockIdx.z;

  // ---- this thread's 16-byte pieces of query head kvh * G + r (issued first: they depend on
  // the token and KV head only, and load beside the sequence lookup)
  const int G = p.group;
  uint4 q_raw[CPT][2];
  uint32_t qf[KSTEPS][2];  // Q^T fragments (B operand of the first product)
  {
    const QT* qrow = reinterpret_cast<const QT*>(p.q) + tok * p.stride_qt +
                     static_cast<int64_t>(kvh * G + r) * p.stride_qh;
    if constexpr (Q8) {
#pragma unroll
      for (int e = 0; e < CPT; ++e) {
        const uint4* src = reinterpret_cast<const uint4*>(qrow + 16 * (c + 4 * e));
        q_raw[e][0] = r < G ? __ldg(src) : make_uint4(0, 0, 0, 0);
        q_raw[e][1] = r < G ? __ldg(src + 1) : make_uint4(0, 0, 0, 0);
      }
    } else {  // 16-bit: the natural d order, pairs (2c, 2c + 1) and (2c + 8, 2c + 9)
#pragma unroll
      for (int kk = 0; kk < KSTEPS; ++kk) {
        const uint32_t* src = reinterpret_cast<const uint32_t*>(qrow + 16 * kk + 2 * c);
        qf[kk][0] = r < G ? __ldg(src) : 0u;
        qf[kk][1] = r < G ? __ldg(src + 4) : 0u;
      }
    }
  }
  // ---- unsplit launches: the first tiles' block ids, guessing sequence = token (checked
  // below), load beside the sequence lookup: one dependent latency less before the first copy
  int blk_spec[STAGES];
#pragma unroll
  for (int i = 0; i < STAGES; ++i) {
    const int b = (warp + i * WARPS) * STEPS + lane;
    blk_spec[i] = (p.num_segments == 1 && tok < p.num_seqs && lane < STEPS && b < p.max_blocks)
                      ? __ldg(p.bt + tok * p.stride_bt + b)
                      : 0;
  }

  // ---- the token's sequence (decode: token i is sequence i unless some sequence has != 1)
  int seq = tok;
  int q_start = __ldg(p.cu_q + tok);
  int q_end = tok < p.num_seqs ? __ldg(p.cu_q + tok + 1) : -1;
  int ctx = tok < p.num_seqs ? __ldg(p.seq_lens + tok) : 0;
  if (q_start != tok || q_end != tok + 1) {
    seq = find_seq(p.cu_q, tok, p.num_seqs);
    q_start = __ldg(p.cu_q + seq);
    q_end = __ldg(p.cu_q + seq + 1);
    ctx = __ldg(p.seq_lens + seq);
  }
  const int n_keys = ctx - (q_end - q_start) + (tok - q_start) + 1;  // causal: keys 0..pos
  const int n_tiles = (n_keys + TILE - 1) / TILE;
  const int n_blocks = (n_keys + BS - 1) / BS;
  int t_lo = 0, t_hi = n_tiles;
  if (p.num_segments > 1) {
    const int per_seg = ((ctx + TILE - 1) / TILE + p.num_segments - 1) / p.num_segments;
    t_lo = seg * per_seg;
    t_hi = min(t_lo + per_seg, n_tiles);
  }
  const int* bt_row = p.bt + static_cast<int64_t>(seq) * p.stride_bt;

  // ---- this warp's tiles: t_lo + warp, + WARPS, ...
  const int my_first = t_lo + warp;
  const int n_my = my_first < t_hi ? (t_hi - my_first + WARPS - 1) / WARPS : 0;
  uint8_t* wsm = smem + warp * (STAGES * SM::STAGE);

  // block ids of a tile: lane b < STEPS holds block b's id (0 past the context: block 0 is a
  // valid address, and the copy is predicated off)
  auto load_blocks = [&](int i) -> int {
    const int t = my_first + i * WARPS;
    const int b = t * STEPS + lane;
    return (i < n_my && lane < STEPS && b < n_blocks) ? __ldg(bt_row + b) : 0;
  };
  // per-lane parts of the copies' addresses, computed once
  constexpr int KROWS = 32 / NCH;  // K rows one warp-wide copy instruction covers
  const int64_t k_lane = kvh * p.stride_kh + (lane / NCH) * p.stride_kt + (lane % NCH) * 16;
  const int64_t k_step = KROWS * p.stride_kt;
  const int k_dst_lane =
      (lane / NCH) * D + ((lane % NCH) ^ (D == 128 ? 4 * ((lane / NCH) & 1) : 0)) * 16;
  const int64_t v_lane = kvh * p.stride_vh + lane * 16;
  // scales: lane < SCH copies chunk (kind, block sb, ch) of 4 floats
  const int s_kind = (lane % SCH) / (4 * STEPS), s_b = ((lane % SCH) / 4) % STEPS;
  const int64_t s_lane = kvh * p.stride_sh + (lane % 4) * 4;
  const int s_dst_lane = (s_kind * TILE + s_b * BS + (lane % 4) * 4) * 4;
  auto issue = [&](int i, int blk_lane) {
    int blk[STEPS];
#pragma unroll
    for (int b = 0; b < STEPS; ++b) blk[b] = __shfl_sync(0xffffffffu, blk_lane, b);
    const int s_blk = __shfl_sync(0xffffffffu, blk_lane, s_b);
    if (i < n_my) {
      const int t = my_first + i * WARPS;
      uint8_t* st = wsm + (i % STAGES) * SM::STAGE;
      const uint32_t sk = smem_addr(st), sv = smem_addr(st + SM::K_BYTES),
                     ss = smem_addr(st + SM::K_BYTES + SM::V_BYTES);
      if constexpr (!Q8) {
        // 16-bit rows (token-major K and V): chunk ch of key row R at ch ^ (R & 7); rows past
        // the context are zero-filled, so their V never reaches P @ V as NaN
#pragma unroll
        for (int b = 0; b < STEPS; ++b) {
          const uint8_t* kb = p.k + blk[b] * p.stride_kb + kvh * p.stride_kh;
          const uint8_t* vb = p.v + blk[b] * p.stride_vb + kvh * p.stride_vh;
#pragma unroll
          for (int j = 0; j < BS * NCH16 / 32; ++j) {
            const int row = lane / NCH16 + j * (32 / NCH16), ch = lane % NCH16;
            const bool ok = t * TILE + b * BS + row < n_keys;
            const uint32_t dst = (b * BS + row) * ROW16 + ((ch ^ (row & 7)) * 16);
            cp_async16(sk + dst, kb + row * p.stride_kt + ch * 16, ok);
            cp_async16(sv + dst, vb + row * p.stride_vt + ch * 16, ok);
          }
        }
      }
#pragma unroll
      for (int b = 0; b < (Q8 ? STEPS : 0); ++b) {
        const bool ok = t * STEPS + b < n_blocks;
        const uint8_t* kb = p.k + blk[b] * p.stride_kb + k_lane;
#pragma unroll
        for (int j = 0; j < BS / KROWS; ++j)
          cp_async16(sk + (b * BS + j * KROWS) * D + k_dst_lane, kb + j * k_step, ok);
        const uint8_t* vb = p.v + blk[b] * p.stride_vb + v_lane;
        const int swz = STEPS == 4 ? 2 * b : 4 * b;
#pragma unroll
        for (int j = 0; j < D / 32; ++j)
          cp_async16(sv + (b * D + 32 * j + (lane ^ swz)) * 16, vb + j * 512, ok);
      }
      if (Q8 && lane < SCH) {
        const bool ok = t * STEPS + s_b < n_blocks;
        const float* base = s_kind ? p.vs : p.ks;
        cp_async16(ss + s_dst_lane, base + s_blk * p.stride_sb + s_lane, ok);
      }
    }
    cp_async_commit();  // always: keeps wait_group's count aligned with the stage
  };

  float o_acc[KSTEPS][4];  // O^T tile mt: rows d = 16 mt + r (+8), cols heads 2c, 2c+1
#pragma unroll
  for (int mt = 0; mt < KSTEPS; ++mt)
#pragma unroll
    for (int i = 0; i < 4; ++i) o_acc[mt][i] = 0.f;
  float m_run[2] = {NEG_BIG, NEG_BIG}, l_run[2] = {0.f, 0.f};
  float v_norm = 1e30f;  // power of two: P' = p * v_scale * v_norm <= 1

  // key slot s = r (and r + 8) of step t is tile key kidx(t) (+ 2)
  const int kbase = 4 * STEPS * (r >> 1) + (r & 1);
  // this thread's V^T chunk: keys [4 STEPS c, 4 STEPS (c + 1)) of the tile
  const int vb = (4 * STEPS * c) / BS, vko = (4 * STEPS * c) % BS;
  const int vswz = STEPS == 4 ? 2 * vb : 4 * vb;

  int blk_next[STAGES];
  if (p.num_segments == 1 && seq == tok) {  // the guess held: mask what lies past the context
#pragma unroll
    for (int s = 0; s < STAGES; ++s) {
      const int b = (my_first + s * WARPS) * STEPS + lane;
      blk_next[s] = (s < n_my && lane < STEPS && b < n_blocks) ? blk_spec[s] : 0;
    }
  } else {
#pragma unroll
    for (int s = 0; s < STAGES; ++s) blk_next[s] = load_blocks(s);
  }
#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) issue(s, blk_next[s]);

  // ---- Q^T fragments (while the first tiles load): head g = r, d permuted as the K rows
  float q_pow = 1.f;  // 2^e >= amax of head r's row
  if constexpr (Q8) {
    float x[CPT][16];
    float amax = 0.f;
#pragma unroll
    for (int e = 0; e < CPT; ++e) {
#pragma unroll
      for (int i = 0; i < 16; ++i) x[e][i] = 0.f;
      if (r < G) {
        const QT* h0 = reinterpret_cast<const QT*>(&q_raw[e][0]);
        const QT* h1 = reinterpret_cast<const QT*>(&q_raw[e][1]);
#pragma unroll
        for (int i = 0; i < 8; ++i) x[e][i] = to_f32<QT>(h0[i]), x[e][8 + i] = to_f32<QT>(h1[i]);
      }
#pragma unroll
      for (int i = 0; i < 16; ++i) amax = fmaxf(amax, fabsf(x[e][i]));
    }
    amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 1));
    amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 2));
    q_pow = amax > 0.f ? exp2f(ceilf(log2f(amax))) : 1.f;
    const float inv = 1.f / q_pow;
#pragma unroll
    for (int kk = 0; kk < KSTEPS; ++kk) {
      const int e = kk / 4, o = 4 * (kk % 4);
      qf[kk][0] = pack_half2(x[e][o] * inv, x[e][o + 1] * inv);
      qf[kk][1] = pack_half2(x[e][o + 2] * inv, x[e][o + 3] * inv);
    }
  }
  // per S^T column (head 2c + i): score scale 2^e * qk_scale and the INT8 bias 1152 sum_d q
  float rs[2], corr[2] = {0.f, 0.f};
  rs[0] = __shfl_sync(0xffffffffu, q_pow, 8 * c) * p.qk_scale;
  rs[1] = __shfl_sync(0xffffffffu, q_pow, 8 * c + 4) * p.qk_scale;
  if constexpr (KIND == KV_INT8) {
    float cb[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
    for (int kk = 0; kk < KSTEPS; ++kk)
      mma16816(cb, HALF2_1152, HALF2_1152, HALF2_1152, HALF2_1152, qf[kk][0], qf[kk][1]);
    corr[0] = cb[0], corr[1] = cb[1];
  }


  for (int i = 0; i < n_my; ++i) {
    // refill: tile i + STAGES - 1 into the stage freed last iteration; prefetch ids one further
    {
      const int nxt = i + STAGES - 1;
      int blk = blk_next[0];
#pragma unroll
      for (int s = 0; s < STAGES - 1; ++s) blk_next[s] = blk_next[s + 1];
      blk_next[STAGES - 1] = load_blocks(nxt + 1);
      // blk_next[STAGES - 2] now holds tile nxt's ids
      blk = blk_next[STAGES - 2];
      issue(nxt, blk);
    }
    cp_async_wait<STAGES - 1>();
    __syncwarp();

    const int t = my_first + i * WARPS;
    const uint8_t* st = wsm + (i % STAGES) * SM::STAGE;
    const uint8_t* sK = st;
    const uint8_t* sV = st + SM::K_BYTES;
    const float* sKS = reinterpret_cast<const float*>(st + SM::K_BYTES + SM::V_BYTES);
    const float* sVS = sKS + TILE;
    const int key0 = t * TILE;
    const bool masked = key0 + TILE > n_keys;

    // -- S^T = K . Q^T, step by step (16 key slots each)
    float s[STEPS][4];
    float vsc[STEPS][2];
    float vmax = 0.f;
    if constexpr (!Q8) {
      // 16-bit: key slot s of step u is tile key 16 u + s; K rows by ldmatrix (row l % 8 + 8 *
      // (l / 8 % 2) of the step, chunk 2 kk + l / 16, swizzled)
      const uint32_t kbase16 = smem_addr(sK);
#pragma unroll
      for (int u = 0; u < STEPS; ++u) {
        float acc[4] = {0.f, 0.f, 0.f, 0.f};
        const int row = 16 * u + (lane % 8) + 8 * ((lane / 8) % 2);
#pragma unroll
        for (int kk = 0; kk < KSTEPS; ++kk) {
          uint32_t a[4];
          ldmatrix_x4(a, kbase16 + row * ROW16 + (((2 * kk + lane / 16) ^ (lane % 8)) * 16));
          mma16816_t<QT>(acc, a, qf[kk][0], qf[kk][1]);
        }
#pragma unroll
        for (int j = 0; j < 4; ++j) s[u][j] = acc[j] * p.qk_scale;
        if (masked) {
          if (key0 + 16 * u + r >= n_keys) s[u][0] = s[u][1] = -INFINITY;
          if (key0 + 16 * u + r + 8 >= n_keys) s[u][2] = s[u][3] = -INFINITY;
        }
      }
    }
#pragma unroll
    for (int u = 0; u < (Q8 ? STEPS : 0); ++u) {
      const int ka = kbase + 4 * u, kb = ka + 2;
      const uint8_t* rowA = sK + ka * D;
      const uint8_t* rowB = sK + kb * D;
      const int sw = D == 128 ? 4 * (r & 1) : 0;
      uint4 xa[CPT], xb[CPT];
#pragma unroll
      for (int e = 0; e < CPT; ++e) {
        xa[e] = *reinterpret_cast<const uint4*>(rowA + (((c + 4 * e) ^ sw) * 16));
        xb[e] = *reinterpret_cast<const uint4*>(rowB + (((c + 4 * e) ^ sw) * 16));
      }
      float acc[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
      for (int kk = 0; kk < KSTEPS; ++kk) {
        const uint32_t* wa = reinterpret_cast<const uint32_t*>(&xa[kk / 4]);
        const uint32_t* wb = reinterpret_cast<const uint32_t*>(&xb[kk / 4]);
        uint32_t a0, a1, a2, a3;
        const uint32_t fa = FP8 ? wa[kk % 4] : (wa[kk % 4] ^ 0x80808080u);
        const uint32_t fb = FP8 ? wb[kk % 4] : (wb[kk % 4] ^ 0x80808080u);
        cvt4<FP8>(fa, a0, a2);
        cvt4<FP8>(fb, a1, a3);
        mma16816(acc, a0, a1, a2, a3, qf[kk][0], qf[kk][1]);
      }
      const float ksa = sKS[ka], ksb = sKS[kb];
      vsc[u][0] = sVS[ka], vsc[u][1] = sVS[kb];
      if (masked) {  // slots past the context in its last block: stale or NaN scales must
        // neither raise v_norm nor reach P' (0 * NaN), as the Triton kernel's v_sc = 0
        if (key0 + ka >= n_keys) vsc[u][0] = 0.f;
        if (key0 + kb >= n_keys) vsc[u][1] = 0.f;
      }
      vmax = fmaxf(vmax, fmaxf(vsc[u][0], vsc[u][1]));
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        s[u][j] = (acc[j] - corr[j]) * (ksa * rs[j]);
        s[u][2 + j] = (acc[2 + j] - corr[j]) * (ksb * rs[j]);
      }
      if (masked) {
        if (key0 + ka >= n_keys) s[u][0] = s[u][1] = -INFINITY;
        if (key0 + kb >= n_keys) s[u][2] = s[u][3] = -INFINITY;
      }
    }
    // -- V's scale normaliser: a power of two with every P' <= 1 (raised like a running max)
    if constexpr (Q8) {
      vmax = fmaxf(vmax, __shfl_xor_sync(0xffffffffu, vmax, 4));
      vmax = fmaxf(vmax, __shfl_xor_sync(0xffffffffu, vmax, 8));
      vmax = fmaxf(vmax, __shfl_xor_sync(0xffffffffu, vmax, 16));
    }
    if (Q8 && vmax * v_norm > 1.f) {  // warp-uniform
      const float nv = exp2f(-ceilf(log2f(vmax)));
      const float ratio = nv / v_norm;
#pragma unroll
      for (int mt = 0; mt < KSTEPS; ++mt)
#pragma unroll
        for (int j = 0; j < 4; ++j) o_acc[mt][j] *= ratio;
      v_norm = nv;
    }
    // -- online softmax per head column (2c, 2c + 1), base 2
    float alpha[2];
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      float mx = NEG_BIG;
#pragma unroll
      for (int u = 0; u < STEPS; ++u) mx = fmaxf(mx, fmaxf(s[u][j], s[u][2 + j]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 4));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 8));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 16));
      const float m_new = fmaxf(m_run[j], mx);
      alpha[j] = exp2f(m_run[j] - m_new);
      m_run[j] = m_new;
    }
    uint32_t bp[STEPS][2];  // P'^T fragments (B operand of the second product)
    float psum[2] = {0.f, 0.f};
#pragma unroll
    for (int u = 0; u < STEPS; ++u) {
      float pv[4];
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        pv[j] = ex2(s[u][j] - m_run[j]);
        pv[2 + j] = ex2(s[u][2 + j] - m_run[j]);
        psum[j] += pv[j] + pv[2 + j];
      }
      if constexpr (Q8) {
        const float fa = vsc[u][0] * v_norm, fb = vsc[u][1] * v_norm;
        bp[u][0] = movmatrix_t(pack_half2(pv[0] * fa, pv[1] * fa));
        bp[u][1] = movmatrix_t(pack_half2(pv[2] * fb, pv[3] * fb));
      } else {
        bp[u][0] = movmatrix_t(pack2<QT>(pv[0], pv[1]));
        bp[u][1] = movmatrix_t(pack2<QT>(pv[2], pv[3]));
      }
    }
#pragma unroll
    for (int j = 0; j < 2; ++j) l_run[j] = l_run[j] * alpha[j] + psum[j];
    // rescale only when some head's max moved (warp-uniform; after the first tiles of a long
    // context the max rarely moves, as FlashAttention-3/4 exploit)
    if (__any_sync(0xffffffffu, alpha[0] != 1.f || alpha[1] != 1.f)) {
#pragma unroll
      for (int mt = 0; mt < KSTEPS; ++mt) {
        o_acc[mt][0] *= alpha[0], o_acc[mt][1] *= alpha[1];
        o_acc[mt][2] *= alpha[0], o_acc[mt][3] *= alpha[1];
      }
    }

    // -- O^T += V^T . P'^T, d-tile by d-tile
    uint32_t vmask[VB / 4];  // FP8: zero the bytes of keys past the context (NaN patterns)
#pragma unroll
    for (int w = 0; w < VB / 4; ++w) vmask[w] = 0xffffffffu;
    if (FP8 && masked) {
#pragma unroll
      for (int w = 0; w < VB / 4; ++w) {
        uint32_t m = 0;
#pragma unroll
        for (int b = 0; b < 4; ++b)
          if (key0 + 4 * STEPS * c + 4 * w + b < n_keys) m |= 0xffu << (8 * b);
        vmask[w] = m;
      }
    }
    if constexpr (!Q8) {
      // 16-bit: V^T by ldmatrix.trans of the token-major tile: matrix m = l / 8 is keys
      // 8 (m / 2) .. + 8 of the step, channels 16 mt + 8 (m % 2) .. + 8
      const uint32_t vbase16 = smem_addr(sV);
      const int m = lane / 8;
#pragma unroll
      for (int mt = 0; mt < KSTEPS; ++mt) {
#pragma unroll
        for (int u = 0; u < STEPS; ++u) {
          const int row = 16 * u + 8 * (m / 2) + (lane % 8);
          uint32_t a[4];
          ldmatrix_x4_trans(a, vbase16 + row * ROW16 + (((2 * mt + m % 2) ^ (lane % 8)) * 16));
          mma16816_t<QT>(o_acc[mt], a, bp[u][0], bp[u][1]);
        }
      }
    }
#pragma unroll
    for (int mt = 0; mt < (Q8 ? KSTEPS : 0); ++mt) {
      const int d0 = 16 * mt + r, d1 = d0 + 8;
      Bytes<VB> v0 = lds<VB>(sV + (vb * D + (d0 ^ vswz)) * 16 + vko);
      Bytes<VB> v1 = lds<VB>(sV + (vb * D + (d1 ^ vswz)) * 16 + vko);
#pragma unroll
      for (int u = 0; u < STEPS; ++u) {
        uint32_t w0 = v0.w[u], w1 = v1.w[u];
        uint32_t a0, a1, a2, a3;
        if constexpr (FP8) {
          w0 &= vmask[u], w1 &= vmask[u];
          cvt4<FP8>(w0, a0, a2);
          cvt4<FP8>(w1, a1, a3);
        } else {  // exact values: the bias must not ride through a long accumulation
          cvt4<FP8>(w0 ^ 0x80808080u, a0, a2);
          cvt4<FP8>(w1 ^ 0x80808080u, a1, a3);
          a0 = hsub2_1152(a0), a1 = hsub2_1152(a1), a2 = hsub2_1152(a2), a3 = hsub2_1152(a3);
        }
        mma16816(o_acc[mt], a0, a1, a2, a3, bp[u][0], bp[u][1]);
      }
    }
    __syncwarp();  // every lane done reading this stage before it is refilled
  }
  cp_async_wait<0>();

  // ---- per-warp (max, sum, unnormalised output) -> shared memory -> merged by the CTA
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    l_run[j] += __shfl_xor_sync(0xffffffffu, l_run[j], 4);
    l_run[j] += __shfl_xor_sync(0xffffffffu, l_run[j], 8);
    l_run[j] += __shfl_xor_sync(0xffffffffu, l_run[j], 16);
  }
  __syncthreads();  // all warps out of their pipelines: the stage memory is reused
  float* mo = reinterpret_cast<float*>(smem);  // [WARPS][GP][D]
  float* mm = mo + WARPS * GP * D;             // [WARPS][GP]
  float* ml = mm + WARPS * GP;
  const float inv_norm = !Q8 ? 1.f : n_my > 0 ? 1.f / v_norm : 0.f;
#pragma unroll
  for (int mt = 0; mt < KSTEPS; ++mt) {
    const int d0 = 16 * mt + r;
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const int g = 2 * c + j;
      mo[(warp * GP + g) * D + d0] = o_acc[mt][j] * inv_norm;
      mo[(warp * GP + g) * D + d0 + 8] = o_acc[mt][2 + j] * inv_norm;
    }
  }
  if (r == 0) {
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      mm[warp * GP + 2 * c + j] = m_run[j];
      ml[warp * GP + 2 * c + j] = l_run[j];
    }
  }
  __syncthreads();
  const bool split = p.num_segments > 1;
  for (int idx = threadIdx.x; idx < G * D; idx += WARPS * 32) {
    const int g = idx / D, d = idx % D;
    float M = NEG_BIG;
#pragma unroll
    for (int w = 0; w < WARPS; ++w) M = fmaxf(M, mm[w * GP + g]);
    float L = 0.f, O = 0.f;
#pragma unroll
    for (int w = 0; w < WARPS; ++w) {
      const float f = exp2f(mm[w * GP + g] - M);
      L += ml[w * GP + g] * f;
      O += mo[(w * GP + g) * D + d] * f;
    }
    const float o = L > 0.f ? O / L : 0.f;
    const int head = kvh * G + g;
    if (split) {
      const int64_t stat = (static_cast<int64_t>(tok) * p.num_heads + head) * p.num_segments + seg;
      p.seg_out[stat * D + d] = o;
      if (d == 0) p.seg_max[stat] = M, p.seg_sum[stat] = L;
    } else {
      QT* dst = reinterpret_cast<QT*>(p.out) + tok * p.stride_ot + head * p.stride_oh + d;
      *dst = from_f32<QT>(o);
    }
  }
}

}  // namespace decode1b
