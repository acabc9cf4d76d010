// The CPU kernels' entry points, shared between the translation units. Plain C++ over raw
// pointers (no torch headers: each kernel file compiles in a second or two, in parallel; only
// bindings.cpp includes torch). Every file is compiled for one instruction set, chosen by the
// loader (local_engine/ops/cpu/__init__.py) from the CPU's flags: AVX-512 (with VNNI / BF16
// where the CPU has them) or AVX2 + FMA (with AVX-VNNI where present).
//
// Weight layouts (packed by the Python side; N padded to a multiple of NB = 32 columns, K to a
// multiple of 2 / 4 with zeros):
//   float32:  [P, K, 32]        float32   (panel p, row k = W[32p:32p+32, k])
//   bfloat16: [P, K/2, 32, 2]   bfloat16  (k pairs interleaved: the vdpbf16ps layout)
//   int8:     [P, K/4, 32, 4]   int8      (k quads interleaved: the vpdpbusd layout), with
//             wsum [32P] int32 (each column's sum over k) and scale [32P] float32
// Each linear computes y[m, n] = sum_k x[m, k] W[n, k] for n < N, rows m < M, columns of
// panels p0 <= p < p1 only (so a caller can split the panels over threads).
#pragma once

#include <cstdint>

namespace promptcache {

constexpr int64_t NB = 32;  // output columns per panel

// "avx512+bf16+vnni", "avx512", "avx2+vnni", "avx2" or "scalar": what this build compiled
const char* isa();
bool has_bf16_kernel();  // a SIMD bfloat16 linear (AVX512-BF16 or the AVX2 widening one)
bool has_int8_kernel();  // a SIMD int8 linear (VNNI, or the AVX2 widening one)

// Runs body(ctx, p0, p1) over [0, P): on the calling thread, or split over torch's threads
// when the call is worth ~2 ms (`us`, estimated) or more (threads.cpp).
void parallel_panels(int64_t P, double us, void (*body)(void*, int64_t, int64_t), void* ctx);
template <typename F>
void for_panels(int64_t P, double us, const F& f) {
  parallel_panels(
      P, us, [](void* c, int64_t p0, int64_t p1) { (*static_cast<const F*>(c))(p0, p1); },
      const_cast<F*>(&f));
}

// x [M, K] row stride ldx, w [P, K, 32], y [M, N] row stride ldy
void linear_f32(const float* x, int64_t ldx, int64_t M, const float* w, int64_t K, int64_t N,
                float* y, int64_t ldy, int64_t p0, int64_t p1);

// xb: x rounded to bfloat16 (bits), [M, 2 * K2] (zero-padded), w [P, K2, 32, 2]
void linear_bf16(const uint16_t* xb, int64_t M, const uint16_t* w, int64_t K2, int64_t N,
                 float* y, int64_t ldy, int64_t p0, int64_t p1);
// x float32 [M, K] -> bfloat16 bits [M, 2 * ceil(K / 2)], round-to-nearest-even (torch's
// .to(bfloat16)), the padding zero
void round_bf16_rows(const float* x, int64_t ldx, int64_t M, int64_t K, uint16_t* xb);

// Activation quantization of fbgemm's dynamic linear, one (scale, zero point) per row: ATen's
// ChooseQuantizationParams over [min(row, 0), max(row, 0)] into uint8 [0, 255], q =
// clamp(nearbyint(fma(x, 1 / scale, zp)), 0, 255). xq [M, 4 * ceil(K / 4)], the padding zero.
void quantize_rows_u8(const float* x, int64_t ldx, int64_t M, int64_t K, uint8_t* xq,
                      int32_t* zp, float* sx);
// xq [M, 4 * K4], w [P, K4, 32, 4]: y = (sum_k xq w - zp * wsum) * (sx * sw), exact int32 sums
void linear_int8(const uint8_t* xq, const int32_t* zp, const float* sx, int64_t M,
                 const int8_t* w, int64_t K4, const int32_t* wsum, const float* sw, int64_t N,
                 float* y, int64_t ldy, int64_t p0, int64_t p1);

// One weight as the decoder layer takes it: kind 0 float32, 1 bfloat16, 2 int8 panels.
struct PanelWeight {
  int64_t kind = 0, n = 0, k = 0;  // output features, input features
  const void* w = nullptr;
  const int32_t* wsum = nullptr;  // int8 only
  const float* scale = nullptr;   // int8 only
};
// y [M, n] (contiguous) = x [M, k] (row stride ldx) @ W^T, threads as parallel_panels decides
void run_linear(const PanelWeight& lin, const float* x, int64_t ldx, int64_t M, float* y);

// An int32 or int64 index tensor read as int64 (row stride for 2-D block tables).
struct Index {
  const int32_t* p32 = nullptr;
  const int64_t* p64 = nullptr;
  int64_t stride = 0;
  int64_t operator()(int64_t i) const { return p32 ? p32[i] : p64[i]; }
  int64_t operator()(int64_t r, int64_t c) const { return (*this)(r * stride + c); }
};

// One Llama decoder layer for T rows (decode.cpp); float32 activations and paged KV cache.
struct LayerArgs {
  const float* x = nullptr;         // [T, H]
  const float* residual = nullptr;  // [T, H] or null (the first layer)
  int64_t T = 0, H = 0;
  Index positions, slot_mapping, block_tables, cu_seqlens_q, seq_lens;
  int64_t num_seqs = 0;
  const float* cos = nullptr;  // [max_pos, D]
  const float* sin = nullptr;
  float* k_cache = nullptr;  // [blocks, bs, KV, D]
  float* v_cache = nullptr;
  int64_t block_size = 0, num_kv_heads = 0, head_dim = 0, num_heads = 0;
  const float* w_in = nullptr;  // [H]
  const float* w_post = nullptr;
  float eps = 0, scale = 0;
  PanelWeight lin[4];     // qkv, o, gate_up, down
  float* out = nullptr;   // [T, H]: the MLP output
  float* h2 = nullptr;    // [T, H]: the residual after attention
};
constexpr int64_t MAX_HEAD_DIM = 256;
void decode_layer(const LayerArgs& a);

// R query rows of one (sequence, KV head) over the keys at `slots` (attention.cpp): row r sees
// keys 0..nk[r]-1; k/v point at this KV head's first element, `row` floats between slots.
void attend_rows(const float* const* q, float* const* out, const int64_t* nk, int64_t R,
                 int64_t D, const int64_t* slots, const float* kc, const float* vc, int64_t row,
                 float scale, float* scores, int64_t ld);

// out [T, I] = silu(gu[:, :I]) * gu[:, I:] for gu [T, 2I] (attention.cpp; exp within 2 ulp)
void silu_mul_rows(const float* gu, int64_t T, int64_t I, float* out);

}  // namespace promptcache
