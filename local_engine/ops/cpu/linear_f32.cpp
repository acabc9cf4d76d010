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
constexpr int MR_MAX = 2;  // 8 accumulators + 4 weight vectors + 1 broadcast of 16 ymm
template <int MR>
inline void panel(const float* x, int64_t ldx, const float* w, int64_t K, float* y, int64_t ldy,
                  int64_t ncols) {
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
