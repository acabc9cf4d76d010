// bfloat16-weight small-M linear over pair panels [P, K2, 32, 2] (kernels.h); x is rounded to
// bfloat16 first (as the torch path's .to(bfloat16)), sums and output are float32.
//
// AVX512-BF16: vdpbf16ps, two products a lane. AVX2 (and AVX-512 without BF16): each 32-byte
// load holds 8 columns x 2 k; a shift (k even) and a mask (k odd) widen them to float32 exactly
// (a bfloat16 is the top half of a float32), then two FMAs a row. The products of two bfloat16
// are exact in float32 either way; only the summation order differs.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels.h"

namespace {

using promptcache::NB;

inline float bf16_to_f32(uint16_t b) {
  const uint32_t u = (uint32_t)b << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

#if defined(__AVX512F__) && defined(__AVX512BF16__)
constexpr int MR_MAX = 12;
template <int MR>
inline void panel(const uint16_t* xb, int64_t ldx, const uint16_t* w, int64_t K2, float* y,
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
  const __mmask16 k1 =
      ncols >= 32 ? 0xFFFF : ncols <= 16 ? 0 : (__mmask16)((1u << (ncols - 16)) - 1);
  for (int m = 0; m < MR; ++m) {
    _mm512_mask_storeu_ps(y + m * ldy, k0, a0[m]);
    _mm512_mask_storeu_ps(y + m * ldy + 16, k1, a1[m]);
  }
}
constexpr bool SIMD = true;
#elif defined(__AVX2__) && defined(__FMA__)
// MR = 1: separate accumulators for even and odd k (8 independent FMA chains); MR = 2: 8
// accumulators + the widened pair + 4 broadcasts of 16 ymm.
constexpr int MR_MAX = 2;
template <int MR>
inline void panel(const uint16_t* xb, int64_t ldx, const uint16_t* w, int64_t K2, float* y,
                  int64_t ldy, int64_t ncols) {
  constexpr int S = MR == 1 ? 2 : 1;  // accumulator sets a row
  __m256 a[MR][S][4];
  for (int m = 0; m < MR; ++m)
    for (int s = 0; s < S; ++s)
      for (int j = 0; j < 4; ++j) a[m][s][j] = _mm256_setzero_ps();
  const __m256i hi = _mm256_set1_epi32((int)0xFFFF0000u);
  for (int64_t k = 0; k < K2; ++k) {
    __m256 xe[MR], xo[MR];
    for (int m = 0; m < MR; ++m) {
      xe[m] = _mm256_set1_ps(bf16_to_f32(xb[m * ldx + 2 * k]));
      xo[m] = _mm256_set1_ps(bf16_to_f32(xb[m * ldx + 2 * k + 1]));
    }
    for (int j = 0; j < 4; ++j) {
      const __m256i v = _mm256_loadu_si256((const __m256i*)(w + k * 2 * NB + 16 * j));
      const __m256 e = _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
      const __m256 o = _mm256_castsi256_ps(_mm256_and_si256(v, hi));
      for (int m = 0; m < MR; ++m) {
        a[m][0][j] = _mm256_fmadd_ps(xe[m], e, a[m][0][j]);
        a[m][S - 1][j] = _mm256_fmadd_ps(xo[m], o, a[m][S - 1][j]);
      }
    }
  }
  alignas(32) float tmp[NB];
  for (int m = 0; m < MR; ++m) {
    for (int j = 0; j < 4; ++j)
      _mm256_store_ps(tmp + 8 * j, S == 2 ? _mm256_add_ps(a[m][0][j], a[m][S - 1][j]) : a[m][0][j]);
    std::memcpy(y + m * ldy, tmp, ncols * sizeof(float));
  }
}
constexpr bool SIMD = true;
#else
constexpr int MR_MAX = 1;
template <int MR>
inline void panel(const uint16_t* xb, int64_t ldx, const uint16_t* w, int64_t K2, float* y,
                  int64_t ldy, int64_t ncols) {
  float acc[NB] = {0};
  for (int64_t k = 0; k < 2 * K2; ++k)
    for (int j = 0; j < NB; ++j)
      acc[j] += bf16_to_f32(xb[k]) * bf16_to_f32(w[(k / 2) * 2 * NB + 2 * j + k % 2]);
  std::memcpy(y, acc, ncols * sizeof(float));
}
constexpr bool SIMD = false;
#endif

template <int MR>
void rows(const uint16_t* x, int64_t ldx, const uint16_t* w, int64_t K2, float* y, int64_t ldy,
          int64_t ncols, int64_t n) {
  if constexpr (MR > 1) {
    if (n < MR) return rows<MR - 1>(x, ldx, w, K2, y, ldy, ncols, n);
  }
  panel<MR>(x, ldx, w, K2, y, ldy, ncols);
}

}  // namespace

namespace promptcache {

bool has_bf16_kernel() { return SIMD; }

void round_bf16_rows(const float* x, int64_t ldx, int64_t M, int64_t K, uint16_t* xb) {
  const int64_t ld = (K + 1) / 2 * 2;
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t k = 0; k < K; ++k) {
      const float f = x[m * ldx + k];
      uint32_t u;
      std::memcpy(&u, &f, 4);
      // c10::BFloat16's round_to_nearest_even; NaN stays a quiet NaN
      xb[m * ld + k] = std::isnan(f) ? 0x7FC0 : (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
    }
    if (ld > K) xb[m * ld + K] = 0;
  }
}

void linear_bf16(const uint16_t* xb, int64_t M, const uint16_t* w, int64_t K2, int64_t N,
                 float* y, int64_t ldy, int64_t p0, int64_t p1) {
  for (int64_t p = p0; p < p1; ++p) {
    const int64_t ncols = std::min<int64_t>(NB, N - p * NB);
    for (int64_t m = 0; m < M; m += MR_MAX)
      rows<MR_MAX>(xb + m * 2 * K2, 2 * K2, w + p * K2 * 2 * NB, K2, y + m * ldy + p * NB, ldy,
                   ncols, std::min<int64_t>(MR_MAX, M - m));
  }
}

}  // namespace promptcache
