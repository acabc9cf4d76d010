// Small-M linear layers for the CPU engine: y[M, N] = x[M, K] @ W^T, M = 1..~16 rows (a decode
// step, a batched decode, a speculative verification), W stored once in a panel layout that a
// single linear read streams: 32 output columns per panel, the panel's K rows contiguous.
//
//   float32:  packed [N/32, K, 32]            float32   (panel p, row k = W[32p:32p+32, k])
//   bfloat16: packed [N/32, K/2, 32, 2]       bfloat16  (k pairs interleaved for vdpbf16ps)
//   int8:     packed [N/32, K/4, 32, 4]       int8      (k quads interleaved for vpdpbusd),
//             wsum [N/32*32] int32 (sum over k of each column), scale [N/32*32] float32
//
// N is padded to a multiple of 32 and K to a multiple of 2 / 4 with zeros (the Python side
// packs, local_engine/ops/cpu/__init__.py). Each thread (at::parallel_for over panels, for
// large calls only: panels_for) reads its panels once, front to back, for up to MR rows of x at a time; more rows re-read the panel
// from L2 (a panel is K * 128 bytes: 74 KB at K = 576).
//
// int8 is the arithmetic of torch's fbgemm dynamic linear (quantized::linear_dynamic): each
// row of x gets asymmetric uint8 parameters from its min/max (ATen's ChooseQuantizationParams,
// the function fbgemm's path calls), q = clamp(nearbyint(x / scale) + zp, 0, 255), an exact
// int32 dot product with the symmetric int8 weights, y = (acc - zp * wsum[j]) * (sx * sw[j]).
// fbgemm picks one (scale, zp) for the whole x; here every row gets its own, which for one row
// is the same thing and for several is what the torch path emulates by dividing rows by their
// max first.
#include "kernels.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/native/quantized/cpu/QuantUtils.h>
#include <c10/util/BFloat16.h>
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace {

constexpr int64_t NB = 32;  // output columns per panel
constexpr int64_t GRAIN = 4;  // panels per parallel_for chunk at the least

// Threads only for calls worth ~2 ms or more on one thread (estimated at 20 GB/s and 100
// GFLOP/s, this Zen 4 core's kernel rates): a prefill, the LM head. Every parallel region ends
// in a barrier that waits for the slowest thread, and on a busy machine a thread that the OS
// has preempted is ~4-12 ms away: measured on this 2-core box at load 3, a 3072 x 576 float32
// GEMV took 0.42 ms on one thread and 11.5 ms split over two. A decode step's ~120 small
// linears therefore run on the calling thread (bench/RESULTS.md "## cpu", session 3).
template <typename F>
void panels_for(int64_t P, double bytes, double flops, const F& f) {
  const double us = std::max(bytes / 20e3, flops / 100e3);
  if (at::get_num_threads() > 1 && us >= 2000.0) {
    at::parallel_for(0, P, GRAIN, f);
  } else {
    f(0, P);
  }
}

}  // namespace

namespace promptcache {

std::string isa() {
#if defined(__AVX512F__)
  std::string s = "avx512";
#if defined(__AVX512BF16__)
  s += "+bf16";
#endif
#if defined(__AVX512VNNI__)
  s += "+vnni";
#endif
  return s;
#elif defined(__AVX2__) && defined(__FMA__)
  return "avx2";
#else
  return "scalar";
#endif
}

}  // namespace promptcache

namespace {

// ---------------------------------------------------------------- float32
#if defined(__AVX512F__)
template <int MR>
inline void f32_panel(const float* x, int64_t ldx, const float* w, int64_t K, float* y,
                      int64_t ldy, int64_t ncols) {
  __m512 a0[MR], a1[MR];
  for (int m = 0; m < MR; ++m) a0[m] = a1[m] = _mm512_setzero_ps();
  for (int64_t k = 0; k < K; ++k) {
    const __m512 w0 = _mm512_loadu_ps(w + k * NB);
    const __m512 w1 = _mm512_loadu_ps(w + k * NB + 16);
    for (int m = 0; m < MR; ++m) {
      const __m512 xb = _mm512_set1_ps(x[m * ldx + k]);
      a0[m] = _mm512_fmadd_ps(xb, w0, a0[m]);
      a1[m] = _mm512_fmadd_ps(xb, w1, a1[m]);
    }
  }
  const __mmask16 k0 = ncols >= 16 ? 0xFFFF : (__mmask16)((1u << ncols) - 1);
  const __mmask16 k1 = ncols >= 32 ? 0xFFFF : ncols <= 16 ? 0 : (__mmask16)((1u << (ncols - 16)) - 1);
  for (int m = 0; m < MR; ++m) {
    _mm512_mask_storeu_ps(y + m * ldy, k0, a0[m]);
    _mm512_mask_storeu_ps(y + m * ldy + 16, k1, a1[m]);
  }
}
constexpr int F32_MR = 12;
#elif defined(__AVX2__) && defined(__FMA__)
template <int MR>
inline void f32_panel(const float* x, int64_t ldx, const float* w, int64_t K, float* y,
                      int64_t ldy, int64_t ncols) {
  __m256 a[MR][4];
  for (int m = 0; m < MR; ++m)
    for (int j = 0; j < 4; ++j) a[m][j] = _mm256_setzero_ps();
  for (int64_t k = 0; k < K; ++k) {
    __m256 wv[4];
    for (int j = 0; j < 4; ++j) wv[j] = _mm256_loadu_ps(w + k * NB + 8 * j);
    for (int m = 0; m < MR; ++m) {
      const __m256 xb = _mm256_broadcast_ss(x + m * ldx + k);
      for (int j = 0; j < 4; ++j) a[m][j] = _mm256_fmadd_ps(xb, wv[j], a[m][j]);
    }
  }
  alignas(32) float tmp[NB];
  for (int m = 0; m < MR; ++m) {
    for (int j = 0; j < 4; ++j) _mm256_store_ps(tmp + 8 * j, a[m][j]);
    std::memcpy(y + m * ldy, tmp, ncols * sizeof(float));
  }
}
constexpr int F32_MR = 2;  // 8 accumulators + 4 weight vectors + 1 broadcast of 16 ymm
#else
template <int MR>
inline void f32_panel(const float* x, int64_t ldx, const float* w, int64_t K, float* y,
                      int64_t ldy, int64_t ncols) {
  for (int m = 0; m < MR; ++m) {
    float acc[NB] = {0};
    for (int64_t k = 0; k < K; ++k)
      for (int j = 0; j < NB; ++j) acc[j] += x[m * ldx + k] * w[k * NB + j];
    std::memcpy(y + m * ldy, acc, ncols * sizeof(float));
  }
}
constexpr int F32_MR = 4;
#endif

template <int MR>
void f32_rows(const float* x, int64_t ldx, const float* w, int64_t K, float* y, int64_t ldy,
              int64_t ncols, int64_t rows) {
  if constexpr (MR > 1) {
    if (rows < MR) return f32_rows<MR - 1>(x, ldx, w, K, y, ldy, ncols, rows);
  }
  f32_panel<MR>(x, ldx, w, K, y, ldy, ncols);
}

void check_x(const at::Tensor& x, int64_t K, at::ScalarType dt, const char* name) {
  TORCH_CHECK(x.dim() == 2 && x.size(1) == K, name, ": x must be [M, ", K, "], got ", x.sizes());
  TORCH_CHECK(x.scalar_type() == dt, name, ": x must be ", dt, ", got ", x.scalar_type());
  TORCH_CHECK(x.stride(1) == 1, name, ": x rows must be contiguous");
  TORCH_CHECK(x.device().is_cpu(), name, ": CPU tensors only");
}

}  // namespace

namespace promptcache {

at::Tensor linear_f32(const at::Tensor& x, const at::Tensor& packed, int64_t N) {
  TORCH_CHECK(packed.dim() == 3 && packed.size(2) == NB && packed.is_contiguous() &&
                  packed.scalar_type() == at::kFloat,
              "linear_f32: packed must be contiguous float32 [N/32, K, 32]");
  const int64_t P = packed.size(0), K = packed.size(1);
  TORCH_CHECK(N <= P * NB && N > (P - 1) * NB, "linear_f32: N=", N, " does not match ", P, " panels");
  check_x(x, K, at::kFloat, "linear_f32");
  const int64_t M = x.size(0);
  at::Tensor y = at::empty({M, N}, x.options());
  if (M == 0) return y;
  const float* xp = x.data_ptr<float>();
  const float* wp = packed.data_ptr<float>();
  float* yp = y.data_ptr<float>();
  const int64_t ldx = x.stride(0);
  panels_for(P, 4.0 * P * K * NB, 2.0 * M * P * K * NB, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      const int64_t ncols = std::min<int64_t>(NB, N - p * NB);
      for (int64_t m = 0; m < M; m += F32_MR) {
        f32_rows<F32_MR>(xp + m * ldx, ldx, wp + p * K * NB, K, yp + m * N + p * NB, N, ncols,
                         std::min<int64_t>(F32_MR, M - m));
      }
    }
  });
  return y;
}

}  // namespace promptcache

namespace {

// ---------------------------------------------------------------- bfloat16
#if defined(__AVX512F__) && defined(__AVX512BF16__)
constexpr int BF_MR = 12;
template <int MR>
inline void bf16_panel(const uint16_t* xb, int64_t ldx, const uint16_t* w, int64_t K2, float* y,
                       int64_t ldy, int64_t ncols) {
  __m512 a0[MR], a1[MR];
  for (int m = 0; m < MR; ++m) a0[m] = a1[m] = _mm512_setzero_ps();
  for (int64_t k = 0; k < K2; ++k) {  // k: a pair of input features
    const __m512bh w0 = (__m512bh)_mm512_loadu_si512(w + k * 2 * NB);
    const __m512bh w1 = (__m512bh)_mm512_loadu_si512(w + k * 2 * NB + 32);
    for (int m = 0; m < MR; ++m) {
      int32_t pair;
      std::memcpy(&pair, xb + m * ldx + 2 * k, 4);
      const __m512bh xv = (__m512bh)_mm512_set1_epi32(pair);
      a0[m] = _mm512_dpbf16_ps(a0[m], xv, w0);
      a1[m] = _mm512_dpbf16_ps(a1[m], xv, w1);
    }
  }
  const __mmask16 k0 = ncols >= 16 ? 0xFFFF : (__mmask16)((1u << ncols) - 1);
  const __mmask16 k1 = ncols >= 32 ? 0xFFFF : ncols <= 16 ? 0 : (__mmask16)((1u << (ncols - 16)) - 1);
  for (int m = 0; m < MR; ++m) {
    _mm512_mask_storeu_ps(y + m * ldy, k0, a0[m]);
    _mm512_mask_storeu_ps(y + m * ldy + 16, k1, a1[m]);
  }
}
template <int MR>
void bf16_rows(const uint16_t* x, int64_t ldx, const uint16_t* w, int64_t K2, float* y,
               int64_t ldy, int64_t ncols, int64_t rows) {
  if constexpr (MR > 1) {
    if (rows < MR) return bf16_rows<MR - 1>(x, ldx, w, K2, y, ldy, ncols, rows);
  }
  bf16_panel<MR>(x, ldx, w, K2, y, ldy, ncols);
}
#endif

}  // namespace

namespace promptcache {

// x float32 [M, K] (rounded to bfloat16 here, round-to-nearest-even as torch's .to(bfloat16)),
// packed bfloat16 [N/32, K2, 32, 2] with K2 = ceil(K / 2); returns float32 [M, N].
at::Tensor linear_bf16(const at::Tensor& x, const at::Tensor& packed, int64_t N) {
#if defined(__AVX512F__) && defined(__AVX512BF16__)
  TORCH_CHECK(packed.dim() == 4 && packed.size(2) == NB && packed.size(3) == 2 &&
                  packed.is_contiguous() && packed.scalar_type() == at::kBFloat16,
              "linear_bf16: packed must be contiguous bfloat16 [N/32, K/2, 32, 2]");
  const int64_t P = packed.size(0), K2 = packed.size(1);
  TORCH_CHECK(x.dim() == 2 && (x.size(1) + 1) / 2 == K2, "linear_bf16: x must be [M, K] with ceil(K/2) = ", K2);
  check_x(x, x.size(1), at::kFloat, "linear_bf16");
  TORCH_CHECK(N <= P * NB && N > (P - 1) * NB, "linear_bf16: N=", N, " does not match ", P, " panels");
  const int64_t M = x.size(0), K = x.size(1);
  at::Tensor y = at::empty({M, N}, x.options());
  if (M == 0) return y;
  std::vector<uint16_t> xb(M * 2 * K2, 0);
  const float* xp = x.data_ptr<float>();
  for (int64_t m = 0; m < M; ++m)
    for (int64_t k = 0; k < K; ++k) xb[m * 2 * K2 + k] = c10::BFloat16(xp[m * x.stride(0) + k]).x;
  const uint16_t* wp = reinterpret_cast<const uint16_t*>(packed.data_ptr<at::BFloat16>());
  float* yp = y.data_ptr<float>();
  // bytes, and products scaled to float32 FMA work (vdpbf16ps does two per lane)
  panels_for(P, 4.0 * P * K2 * NB, 2.0 * M * P * K2 * NB, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      const int64_t ncols = std::min<int64_t>(NB, N - p * NB);
      for (int64_t m = 0; m < M; m += BF_MR)
        bf16_rows<BF_MR>(xb.data() + m * 2 * K2, 2 * K2, wp + p * K2 * 2 * NB, K2,
                         yp + m * N + p * NB, N, ncols, std::min<int64_t>(BF_MR, M - m));
    }
  });
  return y;
#else
  TORCH_CHECK(false, "linear_bf16: built without AVX512-BF16");
#endif
}

}  // namespace promptcache

namespace {

// ---------------------------------------------------------------- int8
#if defined(__AVX512F__) && defined(__AVX512VNNI__)
constexpr int I8_MR = 12;
template <int MR>
inline void i8_panel(const uint8_t* xq, int64_t ldx, const int8_t* w, int64_t K4,
                     const int32_t* zp, const float* sx, const int32_t* wsum, const float* sw,
                     float* y, int64_t ldy, int64_t ncols) {
  __m512i a0[MR], a1[MR];
  for (int m = 0; m < MR; ++m) a0[m] = a1[m] = _mm512_setzero_si512();
  for (int64_t k = 0; k < K4; ++k) {  // k: a quad of input features
    const __m512i w0 = _mm512_loadu_si512(w + k * 4 * NB);
    const __m512i w1 = _mm512_loadu_si512(w + k * 4 * NB + 64);
    for (int m = 0; m < MR; ++m) {
      int32_t quad;
      std::memcpy(&quad, xq + m * ldx + 4 * k, 4);
      const __m512i xv = _mm512_set1_epi32(quad);
      a0[m] = _mm512_dpbusd_epi32(a0[m], xv, w0);
      a1[m] = _mm512_dpbusd_epi32(a1[m], xv, w1);
    }
  }
  const __m512i s0 = _mm512_loadu_si512(wsum), s1 = _mm512_loadu_si512(wsum + 16);
  const __m512 c0 = _mm512_loadu_ps(sw), c1 = _mm512_loadu_ps(sw + 16);
  const __mmask16 k0 = ncols >= 16 ? 0xFFFF : (__mmask16)((1u << ncols) - 1);
  const __mmask16 k1 = ncols >= 32 ? 0xFFFF : ncols <= 16 ? 0 : (__mmask16)((1u << (ncols - 16)) - 1);
  for (int m = 0; m < MR; ++m) {
    const __m512i z = _mm512_set1_epi32(zp[m]);
    const __m512 s = _mm512_set1_ps(sx[m]);
    // (acc - zp * wsum) * (sx * sw), fbgemm's ReQuantizeForFloat order
    const __m512 r0 = _mm512_cvtepi32_ps(_mm512_sub_epi32(a0[m], _mm512_mullo_epi32(z, s0)));
    const __m512 r1 = _mm512_cvtepi32_ps(_mm512_sub_epi32(a1[m], _mm512_mullo_epi32(z, s1)));
    _mm512_mask_storeu_ps(y + m * ldy, k0, _mm512_mul_ps(r0, _mm512_mul_ps(s, c0)));
    _mm512_mask_storeu_ps(y + m * ldy + 16, k1, _mm512_mul_ps(r1, _mm512_mul_ps(s, c1)));
  }
}
template <int MR>
void i8_rows(const uint8_t* xq, int64_t ldx, const int8_t* w, int64_t K4, const int32_t* zp,
             const float* sx, const int32_t* wsum, const float* sw, float* y, int64_t ldy,
             int64_t ncols, int64_t rows) {
  if constexpr (MR > 1) {
    if (rows < MR) return i8_rows<MR - 1>(xq, ldx, w, K4, zp, sx, wsum, sw, y, ldy, ncols, rows);
  }
  i8_panel<MR>(xq, ldx, w, K4, zp, sx, wsum, sw, y, ldy, ncols);
}
#endif

}  // namespace

namespace promptcache {

// x float32 [M, K]; packed int8 [N/32, K4, 32, 4] (K4 = ceil(K / 4)); wsum int32 and scale
// float32 [N/32 * 32]; returns float32 [M, N].
at::Tensor linear_int8(const at::Tensor& x, const at::Tensor& packed, const at::Tensor& wsum,
                       const at::Tensor& scale, int64_t N) {
#if defined(__AVX512F__) && defined(__AVX512VNNI__)
  TORCH_CHECK(packed.dim() == 4 && packed.size(2) == NB && packed.size(3) == 4 &&
                  packed.is_contiguous() && packed.scalar_type() == at::kChar,
              "linear_int8: packed must be contiguous int8 [N/32, K/4, 32, 4]");
  const int64_t P = packed.size(0), K4 = packed.size(1);
  TORCH_CHECK(wsum.numel() == P * NB && wsum.scalar_type() == at::kInt && wsum.is_contiguous(),
              "linear_int8: wsum must be int32 [N/32*32]");
  TORCH_CHECK(scale.numel() == P * NB && scale.scalar_type() == at::kFloat && scale.is_contiguous(),
              "linear_int8: scale must be float32 [N/32*32]");
  TORCH_CHECK(x.dim() == 2 && (x.size(1) + 3) / 4 == K4, "linear_int8: x must be [M, K] with ceil(K/4) = ", K4);
  check_x(x, x.size(1), at::kFloat, "linear_int8");
  TORCH_CHECK(N <= P * NB && N > (P - 1) * NB, "linear_int8: N=", N, " does not match ", P, " panels");
  const int64_t M = x.size(0), K = x.size(1), ldq = 4 * K4;
  at::Tensor y = at::empty({M, N}, x.options());
  if (M == 0) return y;
  std::vector<uint8_t> xq(M * ldq, 0);
  std::vector<int32_t> zp(M);
  std::vector<float> sx(M);
  const float* xp = x.data_ptr<float>();
  for (int64_t m = 0; m < M; ++m) {
    const float* row = xp + m * x.stride(0);
    float lo = row[0], hi = row[0];
    for (int64_t k = 1; k < K; ++k) {
      lo = std::min(lo, row[k]);
      hi = std::max(hi, row[k]);
    }
    const auto qp = quant_utils::ChooseQuantizationParams(lo, hi, 0, 255, false, false, false);
    zp[m] = qp.zero_point;
    sx[m] = qp.scale;
    const float inv = 1.0f / qp.scale;
    uint8_t* q = xq.data() + m * ldq;
    for (int64_t k = 0; k < K; ++k) {
      // fbgemm's QuantizeAvx2: round(fma(x, 1 / scale, zp)), one rounding before the integer
      const float t = std::nearbyint(std::fma(row[k], inv, (float)qp.zero_point));
      q[k] = (uint8_t)std::min(255.0f, std::max(0.0f, t));
    }
    // padding k: the weights there are zero, so any value is fine; zero keeps wsum exact
  }
  const int8_t* wp = packed.data_ptr<int8_t>();
  const int32_t* sp = wsum.data_ptr<int32_t>();
  const float* cp = scale.data_ptr<float>();
  float* yp = y.data_ptr<float>();
  // bytes, and products scaled to float32 FMA work (vpdpbusd does four per lane)
  panels_for(P, 4.0 * P * K4 * NB, 2.0 * M * P * K4 * NB, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      const int64_t ncols = std::min<int64_t>(NB, N - p * NB);
      for (int64_t m = 0; m < M; m += I8_MR)
        i8_rows<I8_MR>(xq.data() + m * ldq, ldq, wp + p * K4 * 4 * NB, K4, zp.data() + m,
                       sx.data() + m, sp + p * NB, cp + p * NB, yp + m * N + p * NB, N, ncols,
                       std::min<int64_t>(I8_MR, M - m));
    }
  });
  return y;
#else
  TORCH_CHECK(false, "linear_int8: built without AVX512-VNNI");
#endif
}

}  // namespace promptcache
