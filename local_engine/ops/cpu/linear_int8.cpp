// int8-weight small-M linear over quad panels [P, K4, 32, 4] (kernels.h), the arithmetic of
// torch's fbgemm dynamic linear (quantized::linear_dynamic) with 8-bit activations: each row
// of x gets asymmetric uint8 parameters from its min/max (ATen's ChooseQuantizationParams,
// ported below), q = clamp(nearbyint(fma(x, 1 / scale, zp)), 0, 255), an exact int32 dot
// product with the symmetric int8 weights, y = (acc - zp * wsum[j]) * (sx * sw[j]). fbgemm
// picks one (scale, zp) for the whole x; here every row gets its own, which for one row is the
// same thing and for several is what the torch path emulates by dividing rows by their max.
//
// Instruction sets (the same integers, so the same output bit for bit on every one):
// - AVX512-VNNI: vpdpbusd on zmm (u8 x s8 quads summed into int32).
// - AVX-VNNI: vpdpbusd on ymm.
// - AVX2 without VNNI: fbgemm there sums u8 x s8 pairs in int16 (vpmaddubsw), which saturates
//   for 8-bit activations, hence its 7-bit `reduce_range`. Here the weights are widened to
//   int16 (vpmovsxbw) and multiplied with the int16 activations by vpmaddwd, whose pairs sum
//   exactly into int32, for pairs of rows; a single row (a decode step) splits each activation
//   into its top 7 bits and its last bit instead, two exact vpmaddubsw (panel_split). 8-bit
//   activations without saturation either way.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels.h"

namespace {

using promptcache::NB;

// ATen's quant_utils::ChooseQuantizationParams (ATen/native/quantized/cpu/QuantUtils.h, torch
// 2.13, "identical to fbgemm::ChooseQuantizationParams") for qmin 0, qmax 255, no sparsity
// preservation, no power-of-two scale, no reduced range; min <= max. Returns the scale in
// double as ATen does (the callers round it to float as fbgemm's path does).
struct QParams {
  double scale;
  int32_t zero_point;
};
QParams choose_qparams(float min, float max) {
  constexpr int32_t qmin = 0, qmax = 255;
  constexpr float SMALL_SCALE_THRESHOLD = 6.1e-5f;
  min = std::min(min, 0.f);
  max = std::max(max, 0.f);
  double scale = (static_cast<double>(max) - min) / (qmax - qmin);
  if (float(scale) == 0.0f || std::isinf(1.0f / float(scale))) scale = 0.1;
  if (scale < SMALL_SCALE_THRESHOLD) {
    float org_scale = scale;
    scale = SMALL_SCALE_THRESHOLD;
    if (min == 0.0f) {
      max = SMALL_SCALE_THRESHOLD * (qmax - qmin);
    } else if (max == 0.0f) {
      min = -SMALL_SCALE_THRESHOLD * (qmax - qmin);
    } else {
      float amplifier = SMALL_SCALE_THRESHOLD / org_scale;
      min *= amplifier;
      max *= amplifier;
    }
  }
  const double zero_point_from_min = qmin - min / scale;
  const double zero_point_from_max = qmax - max / scale;
  const double zero_point_from_min_error = std::abs(qmin) - std::abs(min / scale);
  const double zero_point_from_max_error = std::abs(qmax) - std::abs(max / scale);
  const double initial_zero_point = zero_point_from_min_error < zero_point_from_max_error
                                        ? zero_point_from_min
                                        : zero_point_from_max;
  int32_t nudged = 0;
  if (initial_zero_point < qmin) {
    nudged = qmin;
  } else if (initial_zero_point > qmax) {
    nudged = qmax;
  } else {
    nudged = (int32_t)std::nearbyint(initial_zero_point);
  }
  return {scale, nudged};
}

// (acc - zp * wsum) * (sx * sw) for 8 columns, fbgemm's ReQuantizeForFloat order
#if defined(__AVX2__)
inline __m256 requant8(__m256i acc, int32_t zp, float sx, const int32_t* wsum, const float* sw) {
  const __m256i s = _mm256_loadu_si256((const __m256i*)wsum);
  const __m256 r = _mm256_cvtepi32_ps(_mm256_sub_epi32(acc, _mm256_mullo_epi32(_mm256_set1_epi32(zp), s)));
  return _mm256_mul_ps(r, _mm256_mul_ps(_mm256_set1_ps(sx), _mm256_loadu_ps(sw)));
}
#endif

#if defined(__AVX512F__) && defined(__AVX512VNNI__)
constexpr int MR_MAX = 12;
constexpr bool SIMD = true;
template <int MR>
inline void panel(const uint8_t* xq, int64_t ldx, const int8_t* w, int64_t K4, const int32_t* zp,
                  const float* sx, const int32_t* wsum, const float* sw, float* y, int64_t ldy,
                  int64_t ncols) {
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
  const __mmask16 k1 =
      ncols >= 32 ? 0xFFFF : ncols <= 16 ? 0 : (__mmask16)((1u << (ncols - 16)) - 1);
  for (int m = 0; m < MR; ++m) {
    const __m512i z = _mm512_set1_epi32(zp[m]);
    const __m512 s = _mm512_set1_ps(sx[m]);
    const __m512 r0 = _mm512_cvtepi32_ps(_mm512_sub_epi32(a0[m], _mm512_mullo_epi32(z, s0)));
    const __m512 r1 = _mm512_cvtepi32_ps(_mm512_sub_epi32(a1[m], _mm512_mullo_epi32(z, s1)));
    _mm512_mask_storeu_ps(y + m * ldy, k0, _mm512_mul_ps(r0, _mm512_mul_ps(s, c0)));
    _mm512_mask_storeu_ps(y + m * ldy + 16, k1, _mm512_mul_ps(r1, _mm512_mul_ps(s, c1)));
  }
}
#elif defined(__AVX2__) && defined(__AVXVNNI__)
constexpr int MR_MAX = 3;  // 12 accumulators + 3 broadcasts + 1 weight vector of 16 ymm
constexpr bool SIMD = true;
template <int MR>
inline void panel(const uint8_t* xq, int64_t ldx, const int8_t* w, int64_t K4, const int32_t* zp,
                  const float* sx, const int32_t* wsum, const float* sw, float* y, int64_t ldy,
                  int64_t ncols) {
  __m256i a[MR][4];
  for (int m = 0; m < MR; ++m)
    for (int j = 0; j < 4; ++j) a[m][j] = _mm256_setzero_si256();
  for (int64_t k = 0; k < K4; ++k) {
    __m256i xv[MR];
    for (int m = 0; m < MR; ++m) {
      int32_t quad;
      std::memcpy(&quad, xq + m * ldx + 4 * k, 4);
      xv[m] = _mm256_set1_epi32(quad);
    }
    for (int j = 0; j < 4; ++j) {
      const __m256i wv = _mm256_loadu_si256((const __m256i*)(w + k * 4 * NB + 32 * j));
      for (int m = 0; m < MR; ++m) a[m][j] = _mm256_dpbusd_avx_epi32(a[m][j], xv[m], wv);
    }
  }
  alignas(32) float tmp[NB];
  for (int m = 0; m < MR; ++m) {
    for (int j = 0; j < 4; ++j)
      _mm256_store_ps(tmp + 8 * j, requant8(a[m][j], zp[m], sx[m], wsum + 8 * j, sw + 8 * j));
    std::memcpy(y + m * ldy, tmp, ncols * sizeof(float));
  }
}
#elif defined(__AVX2__)
constexpr int MR_MAX = 2;
constexpr bool SIMD = true;
#define PROMPTCACHE_INT8_WIDEN 1  // x arrives as int16 quads (xw), not uint8
// G = 4 chunks of 16 weight bytes (4 columns x 4 k) a pass, two passes a panel (16 columns
// each): MR x 4 accumulators + the widened chunks + MR broadcasts fit the 16 ymm (with G = 8
// and one row, g++ 12 spills an accumulator, and its store-to-load round trip every k step
// halved the speed). vpmaddwd leaves each column's sum as two int32 lanes (k 0+1, k 2+3),
// added at the end.
template <int MR>
inline void panel(const int16_t* xw, int64_t ldx, const int8_t* w, int64_t K4, const int32_t* zp,
                  const float* sx, const int32_t* wsum, const float* sw, float* y, int64_t ldy,
                  int64_t ncols) {
  constexpr int G = 4;
  alignas(32) float tmp[MR][NB];
  for (int h = 0; h < 8 / G; ++h) {
    __m256i a[MR][G];
    for (int m = 0; m < MR; ++m)
      for (int g = 0; g < G; ++g) a[m][g] = _mm256_setzero_si256();
    for (int64_t k = 0; k < K4; ++k) {
      __m256i xv[MR];
      for (int m = 0; m < MR; ++m) {
        int64_t quad;
        std::memcpy(&quad, xw + m * ldx + 4 * k, 8);
        xv[m] = _mm256_set1_epi64x(quad);
      }
      const int8_t* wk = w + k * 4 * NB + 16 * G * h;
      for (int g = 0; g < G; ++g) {
        const __m256i wv = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i*)(wk + 16 * g)));
        for (int m = 0; m < MR; ++m)
          a[m][g] = _mm256_add_epi32(a[m][g], _mm256_madd_epi16(wv, xv[m]));
      }
    }
    for (int m = 0; m < MR; ++m)
      for (int g = 0; g < G; g += 2) {
        // hadd within 128-bit lanes: [c0 c1 c4 c5 | c2 c3 c6 c7] -> columns in order
        const __m256i s = _mm256_permute4x64_epi64(_mm256_hadd_epi32(a[m][g], a[m][g + 1]), 0xD8);
        const int64_t c = 4 * (G * h + g);
        _mm256_store_ps(tmp[m] + c, requant8(s, zp[m], sx[m], wsum + c, sw + c));
      }
  }
  for (int m = 0; m < MR; ++m) std::memcpy(y + m * ldy, tmp[m], ncols * sizeof(float));
}

// One row, without widening the weights: x = 2 xh + xl with xh = x >> 1 in [0, 127] and xl =
// x & 1, so vpmaddubsw's u8 x s8 pair sums stay exact (|2 * 127 * 128| < 2^15) for both halves.
// The xh products go to int32 at once, doubled (vpmaddwd by 2); the xl ones (pair sums of at
// most 2 * 128 in magnitude) collect in int16 for up to 127 k steps, then join the int32 sums
// (vpmaddwd by 1). 3 multiplies and 2 adds per 32 weight bytes, no shuffles; each int32 lane
// is one column's exact sum over k. hl: per k quad, xh's 4 bytes then xl's.
inline void panel_split(const uint32_t* hl, const int8_t* w, int64_t K4, int32_t zp, float sx,
                        const int32_t* wsum, const float* sw, float* y, int64_t ncols) {
  __m256i acc[4], low[4];
  for (int j = 0; j < 4; ++j) acc[j] = low[j] = _mm256_setzero_si256();
  const __m256i one = _mm256_set1_epi16(1), two = _mm256_set1_epi16(2);
  for (int64_t k0 = 0; k0 < K4; k0 += 127) {
    const int64_t k1 = std::min<int64_t>(K4, k0 + 127);
    for (int64_t k = k0; k < k1; ++k) {
      const __m256i xh = _mm256_set1_epi32((int32_t)hl[2 * k]);
      const __m256i xl = _mm256_set1_epi32((int32_t)hl[2 * k + 1]);
      for (int j = 0; j < 4; ++j) {
        const __m256i wv = _mm256_loadu_si256((const __m256i*)(w + k * 4 * NB + 32 * j));
        acc[j] = _mm256_add_epi32(acc[j], _mm256_madd_epi16(_mm256_maddubs_epi16(xh, wv), two));
        low[j] = _mm256_add_epi16(low[j], _mm256_maddubs_epi16(xl, wv));
      }
    }
    for (int j = 0; j < 4; ++j) {
      acc[j] = _mm256_add_epi32(acc[j], _mm256_madd_epi16(low[j], one));
      low[j] = _mm256_setzero_si256();
    }
  }
  alignas(32) float tmp[NB];
  for (int j = 0; j < 4; ++j)
    _mm256_store_ps(tmp + 8 * j, requant8(acc[j], zp, sx, wsum + 8 * j, sw + 8 * j));
  std::memcpy(y, tmp, ncols * sizeof(float));
}
#else
constexpr int MR_MAX = 1;
constexpr bool SIMD = false;
template <int MR>
inline void panel(const uint8_t* xq, int64_t ldx, const int8_t* w, int64_t K4, const int32_t* zp,
                  const float* sx, const int32_t* wsum, const float* sw, float* y, int64_t ldy,
                  int64_t ncols) {
  for (int64_t j = 0; j < ncols; ++j) {
    int32_t acc = 0;
    for (int64_t k = 0; k < 4 * K4; ++k) acc += (int32_t)xq[k] * w[(k / 4) * 4 * NB + 4 * j + k % 4];
    y[j] = (float)(acc - zp[0] * wsum[j]) * (sx[0] * sw[j]);
  }
}
#endif

template <int MR, typename X>
void rows(const X* x, int64_t ldx, const int8_t* w, int64_t K4, const int32_t* zp,
          const float* sx, const int32_t* wsum, const float* sw, float* y, int64_t ldy,
          int64_t ncols, int64_t n) {
  if constexpr (MR > 1) {
    if (n < MR) return rows<MR - 1>(x, ldx, w, K4, zp, sx, wsum, sw, y, ldy, ncols, n);
  }
  panel<MR>(x, ldx, w, K4, zp, sx, wsum, sw, y, ldy, ncols);
}

template <typename X>
void all_panels(const X* x, int64_t ldx, const int32_t* zp, const float* sx, int64_t M,
                const int8_t* w, int64_t K4, const int32_t* wsum, const float* sw, int64_t N,
                float* y, int64_t ldy, int64_t p0, int64_t p1) {
  for (int64_t p = p0; p < p1; ++p) {
    const int64_t ncols = std::min<int64_t>(NB, N - p * NB);
    for (int64_t m = 0; m < M; m += MR_MAX)
      rows<MR_MAX>(x + m * ldx, ldx, w + p * K4 * 4 * NB, K4, zp + m, sx + m, wsum + p * NB,
                   sw + p * NB, y + m * ldy + p * NB, ldy, ncols, std::min<int64_t>(MR_MAX, M - m));
  }
}

}  // namespace

namespace promptcache {

bool has_int8_kernel() { return SIMD; }

void quantize_rows_u8(const float* x, int64_t ldx, int64_t M, int64_t K, uint8_t* xq,
                      int32_t* zp, float* sx) {
  const int64_t ldq = (K + 3) / 4 * 4;
  for (int64_t m = 0; m < M; ++m) {
    const float* row = x + m * ldx;
    float lo = row[0], hi = row[0];
    for (int64_t k = 1; k < K; ++k) {
      lo = std::min(lo, row[k]);
      hi = std::max(hi, row[k]);
    }
    const QParams qp = choose_qparams(lo, hi);
    zp[m] = qp.zero_point;
    sx[m] = (float)qp.scale;
    const float inv = 1.0f / qp.scale;
    uint8_t* q = xq + m * ldq;
    for (int64_t k = 0; k < K; ++k) {
      // fbgemm's QuantizeAvx2: round(fma(x, 1 / scale, zp)), one rounding before the integer
      const float t = std::nearbyint(std::fma(row[k], inv, (float)qp.zero_point));
      q[k] = (uint8_t)std::min(255.0f, std::max(0.0f, t));
    }
    // padding k: the weights there are zero, so any value is fine; zero keeps wsum exact
    for (int64_t k = K; k < ldq; ++k) q[k] = 0;
  }
}

void linear_int8(const uint8_t* xq, const int32_t* zp, const float* sx, int64_t M,
                 const int8_t* w, int64_t K4, const int32_t* wsum, const float* sw, int64_t N,
                 float* y, int64_t ldy, int64_t p0, int64_t p1) {
#if defined(PROMPTCACHE_INT8_WIDEN)
  // pairs of rows: x widened to int16 (vpmaddwd's operand); a last single row: split into
  // halves (panel_split); both prepared once a call, not once a panel
  const int64_t pairs = M / 2 * 2;
  std::vector<int16_t> xw(pairs * 4 * K4);
  for (int64_t i = 0; i < pairs * 4 * K4; ++i) xw[i] = xq[i];
  std::vector<uint32_t> hl(M > pairs ? 2 * K4 : 0);
  if (M > pairs) {
    const uint8_t* last = xq + pairs * 4 * K4;
    for (int64_t k = 0; k < K4; ++k) {
      uint32_t q;
      std::memcpy(&q, last + 4 * k, 4);
      hl[2 * k] = (q >> 1) & 0x7F7F7F7Fu;
      hl[2 * k + 1] = q & 0x01010101u;
    }
  }
  for (int64_t p = p0; p < p1; ++p) {
    const int64_t ncols = std::min<int64_t>(NB, N - p * NB);
    const int8_t* wp = w + p * K4 * 4 * NB;
    for (int64_t m = 0; m < pairs; m += 2)
      panel<2>(xw.data() + m * 4 * K4, 4 * K4, wp, K4, zp + m, sx + m, wsum + p * NB,
               sw + p * NB, y + m * ldy + p * NB, ldy, ncols);
    if (M > pairs)
      panel_split(hl.data(), wp, K4, zp[pairs], sx[pairs], wsum + p * NB, sw + p * NB,
                  y + pairs * ldy + p * NB, ncols);
  }
#else
  all_panels(xq, 4 * K4, zp, sx, M, w, K4, wsum, sw, N, y, ldy, p0, p1);
#endif
}

}  // namespace promptcache
