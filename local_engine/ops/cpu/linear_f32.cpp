// float32 small-M linear over panels [P, K, 32] (kernels.h): each panel is read once, front to
// back, for up to MR rows of x at a time; more rows re-read it from L2 (a panel is K * 128
// bytes: 74 KB at K = 576). One row streams at the read bandwidth; 8-512 rows run 1.0-3.3x
// faster than oneMKL's GEMM (bench/gemv_cpu.py, bench/RESULTS.md "## cpu", session 3).
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "kernels.h"

namespace {

using promptcache::NB;

#if defined(__AVX512F__)
constexpr int MR_MAX = 12;  // 24 accumulators + 2 weight vectors of 32 zmm
template <int MR>
inline void panel(const float* x, int64_t ldx, const float* w, int64_t K, float* y, int64_t ldy,
                  int64_t ncols) {
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
  const __mmask16 k1 =
      ncols >= 32 ? 0xFFFF : ncols <= 16 ? 0 : (__mmask16)((1u << (ncols - 16)) - 1);
  for (int m = 0; m < MR; ++m) {
    _mm512_mask_storeu_ps(y + m * ldy, k0, a0[m]);
    _mm512_mask_storeu_ps(y + m * ldy + 16, k1, a1[m]);
  }
}
#elif defined(__AVX2__) && defined(__FMA__)
// One row: the whole panel in one pass (4 accumulators), each weight byte read once. More rows:
// two passes over 16-column halves with up to 6 rows each (12 accumulators + 2 weight vectors +
// 1 broadcast of 16 ymm: the 6 x 16 block of AVX2 SGEMM kernels), 1.5 loads per 2 FMAs where
// 2 rows x 32 columns took 3 (measured at 64 rows: the 2-row version ran 1.45x slower than
// oneMKL's AVX2 GEMM).
constexpr int MR_MAX = 6;
template <int MR>
inline void panel(const float* x, int64_t ldx, const float* w, int64_t K, float* y, int64_t ldy,
                  int64_t ncols) {
  alignas(32) float tmp[MR][NB];
  if constexpr (MR == 1) {
    __m256 a[4];
    for (int j = 0; j < 4; ++j) a[j] = _mm256_setzero_ps();
    for (int64_t k = 0; k < K; ++k) {
      const __m256 xb = _mm256_broadcast_ss(x + k);
      for (int j = 0; j < 4; ++j) a[j] = _mm256_fmadd_ps(xb, _mm256_loadu_ps(w + k * NB + 8 * j), a[j]);
    }
    for (int j = 0; j < 4; ++j) _mm256_store_ps(tmp[0] + 8 * j, a[j]);
  } else {
    for (int h = 0; h < 2; ++h) {
      __m256 a0[MR], a1[MR];
      for (int m = 0; m < MR; ++m) a0[m] = a1[m] = _mm256_setzero_ps();
      const float* wh = w + 16 * h;
      for (int64_t k = 0; k < K; ++k) {
        const __m256 w0 = _mm256_loadu_ps(wh + k * NB);
        const __m256 w1 = _mm256_loadu_ps(wh + k * NB + 8);
        for (int m = 0; m < MR; ++m) {
          const __m256 xb = _mm256_broadcast_ss(x + m * ldx + k);
          a0[m] = _mm256_fmadd_ps(xb, w0, a0[m]);
          a1[m] = _mm256_fmadd_ps(xb, w1, a1[m]);
        }
      }
      for (int m = 0; m < MR; ++m) {
        _mm256_store_ps(tmp[m] + 16 * h, a0[m]);
        _mm256_store_ps(tmp[m] + 16 * h + 8, a1[m]);
      }
    }
  }
  for (int m = 0; m < MR; ++m) std::memcpy(y + m * ldy, tmp[m], ncols * sizeof(float));
}
#else
constexpr int MR_MAX = 4;
template <int MR>
inline void panel(const float* x, int64_t ldx, const float* w, int64_t K, float* y, int64_t ldy,
                  int64_t ncols) {
  for (int m = 0; m < MR; ++m) {
    float acc[NB] = {0};
    for (int64_t k = 0; k < K; ++k)
      for (int j = 0; j < NB; ++j) acc[j] += x[m * ldx + k] * w[k * NB + j];
    std::memcpy(y + m * ldy, acc, ncols * sizeof(float));
  }
}
#endif

template <int MR>
void rows(const float* x, int64_t ldx, const float* w, int64_t K, float* y, int64_t ldy,
          int64_t ncols, int64_t n) {
  if constexpr (MR > 1) {
    if (n < MR) return rows<MR - 1>(x, ldx, w, K, y, ldy, ncols, n);
  }
  panel<MR>(x, ldx, w, K, y, ldy, ncols);
}

}  // namespace

namespace promptcache {

void linear_f32(const float* x, int64_t ldx, int64_t M, const float* w, int64_t K, int64_t N,
                float* y, int64_t ldy, int64_t p0, int64_t p1) {
  for (int64_t p = p0; p < p1; ++p) {
    const int64_t ncols = std::min<int64_t>(NB, N - p * NB);
    for (int64_t m = 0; m < M; m += MR_MAX)
      rows<MR_MAX>(x + m * ldx, ldx, w + p * K * NB, K, y + m * ldy + p * NB, ldy, ncols,
                   std::min<int64_t>(MR_MAX, M - m));
  }
}

}  // namespace promptcache
