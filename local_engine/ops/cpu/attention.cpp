// Paged GQA attention for a few query rows (kernels.h, attend_rows), and the MLP's SiLU-and-
// multiply (silu_mul_rows), float32; attention is exact softmax
// (max-subtracted; exp by Cephes' expf polynomial, within 2 ulp) on AVX-512 (16 lanes) or AVX2
// (8 lanes): one generic routine over a small vector type of each width.
//
// One (sequence, KV head): R query rows (the group's query heads of each new token) over the
// keys at `slots`; row r sees keys 0..nk[r]-1 (its causal prefix). Every key tile of L keys is
// read from the cache once per row while it sits in L1 (scores: L dot products a row, summed by
// a transpose-and-add tree), and every value row once per block of rows (outputs: fused
// multiply-adds into the block's accumulators). `scores` holds R x ld floats (ld >= max nk
// rounded up to 16).
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels.h"

namespace {

#if defined(__AVX512F__)
struct Vec {
  using T = __m512;
  static constexpr int L = 16;
  static constexpr int ACC = 24;  // accumulators of the output block (of 32 zmm)
  static T zero() { return _mm512_setzero_ps(); }
  static T set1(float v) { return _mm512_set1_ps(v); }
  static T load(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, T v) { _mm512_storeu_ps(p, v); }
  static T load_n(const float* p, int64_t n) { return _mm512_maskz_loadu_ps(mask(n), p); }
  static void store_n(float* p, int64_t n, T v) { _mm512_mask_storeu_ps(p, mask(n), v); }
  static T fmadd(T a, T b, T c) { return _mm512_fmadd_ps(a, b, c); }
  static T mul(T a, T b) { return _mm512_mul_ps(a, b); }
  static T add(T a, T b) { return _mm512_add_ps(a, b); }
  static T sub(T a, T b) { return _mm512_sub_ps(a, b); }
  static T div(T a, T b) { return _mm512_div_ps(a, b); }
  static T min(T a, T b) { return _mm512_min_ps(a, b); }
  // lanes where s < 0 take a, the others b
  static T select_neg(T s, T a, T b) {
    return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(s, zero(), _CMP_LT_OQ), b, a);
  }
  static float reduce(T v) { return _mm512_reduce_add_ps(v); }
  static __mmask16 mask(int64_t n) { return (__mmask16)((1u << n) - 1); }
  // exp(x) for x <= 0 (softmax's exponents): 2^n * p(r), r = x - n ln 2
  static T exp(T x) {
    x = _mm512_max_ps(x, set1(-87.0f));
    const T n = _mm512_roundscale_ps(mul(x, set1(1.44269504088896341f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    return _mm512_scalef_ps(poly(n, x), n);
  }
  static T poly(T n, T x) {
    T r = _mm512_fnmadd_ps(n, set1(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, set1(-2.12194440e-4f), r);
    T p = set1(1.9875691500e-4f);
    p = fmadd(p, r, set1(1.3981999507e-3f));
    p = fmadd(p, r, set1(8.3334519073e-3f));
    p = fmadd(p, r, set1(4.1665795894e-2f));
    p = fmadd(p, r, set1(1.6666665459e-1f));
    p = fmadd(p, r, set1(5.0000001201e-1f));
    return fmadd(p, mul(r, r), add(r, set1(1.0f)));
  }
  // The 16 sums of v[0..15] (each over its 16 lanes) as one vector, in order: a
  // transpose-and-add tree (8 + 4 + 2 + 1 shuffle pairs), not 16 horizontal reductions.
  static T sum_lanes(T* v) {
    T t[8], w[4], x[2];
    for (int i = 0; i < 8; ++i)  // per 128-bit lane: (a0+a2, b0+b2, a1+a3, b1+b3)
      t[i] = add(_mm512_unpacklo_ps(v[2 * i], v[2 * i + 1]), _mm512_unpackhi_ps(v[2 * i], v[2 * i + 1]));
    for (int i = 0; i < 4; ++i) {  // per 128-bit lane: the lane's sums of 4 vectors, in order
      const __m512d a = _mm512_castps_pd(t[2 * i]), b = _mm512_castps_pd(t[2 * i + 1]);
      w[i] = add(_mm512_castpd_ps(_mm512_unpacklo_pd(a, b)), _mm512_castpd_ps(_mm512_unpackhi_pd(a, b)));
    }
    for (int i = 0; i < 2; ++i)  // lanes (0+1, 2+3) of w[2i] then of w[2i+1]
      x[i] = add(_mm512_shuffle_f32x4(w[2 * i], w[2 * i + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                 _mm512_shuffle_f32x4(w[2 * i], w[2 * i + 1], _MM_SHUFFLE(3, 1, 3, 1)));
    return add(_mm512_shuffle_f32x4(x[0], x[1], _MM_SHUFFLE(2, 0, 2, 0)),
               _mm512_shuffle_f32x4(x[0], x[1], _MM_SHUFFLE(3, 1, 3, 1)));
  }
};
#elif defined(__AVX2__) && defined(__FMA__)
struct Vec {
  using T = __m256;
  static constexpr int L = 8;
  static constexpr int ACC = 12;  // of 16 ymm
  static T zero() { return _mm256_setzero_ps(); }
  static T set1(float v) { return _mm256_set1_ps(v); }
  static T load(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, T v) { _mm256_storeu_ps(p, v); }
  static __m256i mask(int64_t n) {  // lanes < n all ones
    return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  }
  static T load_n(const float* p, int64_t n) { return _mm256_maskload_ps(p, mask(n)); }
  static void store_n(float* p, int64_t n, T v) { _mm256_maskstore_ps(p, mask(n), v); }
  static T fmadd(T a, T b, T c) { return _mm256_fmadd_ps(a, b, c); }
  static T mul(T a, T b) { return _mm256_mul_ps(a, b); }
  static T add(T a, T b) { return _mm256_add_ps(a, b); }
  static T sub(T a, T b) { return _mm256_sub_ps(a, b); }
  static T div(T a, T b) { return _mm256_div_ps(a, b); }
  static T min(T a, T b) { return _mm256_min_ps(a, b); }
  static T select_neg(T s, T a, T b) { return _mm256_blendv_ps(b, a, _mm256_cmp_ps(s, zero(), _CMP_LT_OQ)); }
  static float reduce(T v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
  }
  // exp(x) for x <= 0, as the AVX-512 one: 2^n from the exponent bits (n >= -126 after the
  // clamp, so 2^n is a normal float and the product rounds as scalef's)
  static T exp(T x) {
    x = _mm256_max_ps(x, set1(-87.0f));
    const T n = _mm256_round_ps(mul(x, set1(1.44269504088896341f)),
                                _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    T r = _mm256_fnmadd_ps(n, set1(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, set1(-2.12194440e-4f), r);
    T p = set1(1.9875691500e-4f);
    p = fmadd(p, r, set1(1.3981999507e-3f));
    p = fmadd(p, r, set1(8.3334519073e-3f));
    p = fmadd(p, r, set1(4.1665795894e-2f));
    p = fmadd(p, r, set1(1.6666665459e-1f));
    p = fmadd(p, r, set1(5.0000001201e-1f));
    p = fmadd(p, mul(r, r), add(r, set1(1.0f)));
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return mul(p, _mm256_castsi256_ps(e));
  }
  // The 8 sums of v[0..7] (each over its 8 lanes) as one vector, in order
  static T sum_lanes(T* v) {
    const T a = _mm256_hadd_ps(_mm256_hadd_ps(v[0], v[1]), _mm256_hadd_ps(v[2], v[3]));
    const T b = _mm256_hadd_ps(_mm256_hadd_ps(v[4], v[5]), _mm256_hadd_ps(v[6], v[7]));
    // a = [v0..v3 low halves | v0..v3 high halves], b the same for v4..v7
    return add(_mm256_permute2f128_ps(a, b, 0x20), _mm256_permute2f128_ps(a, b, 0x31));
  }
};
#endif

#if defined(__AVX2__) && defined(__FMA__)
void attend(const float* const* q, float* const* out, const int64_t* nk, int64_t R, int64_t D,
            const int64_t* slots, const float* kc, const float* vc, int64_t row, float scale,
            float* scores, int64_t ld) {
  using T = Vec::T;
  constexpr int L = Vec::L;
  const int64_t C = D / L;
  int64_t max_nk = 0;
  for (int64_t r = 0; r < R; ++r) max_nk = std::max(max_nk, nk[r]);
  const T vscale = Vec::set1(scale);
  // 1. scores, tile by tile (keys past a row's nk are computed over slot 0 and ignored)
  T acc[L];
  for (int64_t t0 = 0; t0 < max_nk; t0 += L) {
    const float* kt[L];
    for (int i = 0; i < L; ++i) kt[i] = kc + slots[t0 + i < max_nk ? t0 + i : 0] * row;
    for (int64_t r = 0; r < R; ++r) {
      if (t0 >= nk[r]) continue;
      const float* qr = q[r];
      for (int i = 0; i < L; ++i) acc[i] = Vec::zero();
      for (int64_t c = 0; c < C; ++c) {
        const T qv = Vec::load(qr + L * c);
        for (int i = 0; i < L; ++i) acc[i] = Vec::fmadd(qv, Vec::load(kt[i] + L * c), acc[i]);
      }
      Vec::store(scores + r * ld + t0, Vec::mul(Vec::sum_lanes(acc), vscale));
    }
  }
  // 2. softmax of each row over its nk keys (max-subtracted); zeros past nk to the tile end
  std::vector<float> inv(R);
  for (int64_t r = 0; r < R; ++r) {
    float* s = scores + r * ld;
    const int64_t n = nk[r];
    float mx = -INFINITY;
    for (int64_t t = 0; t < n; ++t) mx = std::max(mx, s[t]);
    T sum = Vec::zero();
    const T vmx = Vec::set1(mx);
    int64_t t = 0;
    for (; t + L <= n; t += L) {
      const T e = Vec::exp(Vec::sub(Vec::load(s + t), vmx));
      Vec::store(s + t, e);
      sum = Vec::add(sum, e);
    }
    if (t < n) {
      const T e = Vec::exp(Vec::sub(Vec::load_n(s + t, n - t), vmx));
      Vec::store(s + t, Vec::zero());  // within the row: t + L <= n rounded up to 16 <= ld
      Vec::store_n(s + t, n - t, e);
      sum = Vec::add(sum, Vec::load(s + t));
    }
    for (int64_t z = n; z < max_nk; ++z) s[z] = 0.0f;
    inv[r] = 1.0f / Vec::reduce(sum);
  }
  // 3. outputs: blocks of rows x C accumulators, one pass over the values per block
  const int64_t RB = std::max<int64_t>(1, std::min<int64_t>(4, Vec::ACC / C));
  std::vector<T> o(RB * C);
  for (int64_t r0 = 0; r0 < R; r0 += RB) {
    const int64_t nr = std::min(RB, R - r0);
    int64_t n = 0;
    for (int64_t r = r0; r < r0 + nr; ++r) n = std::max(n, nk[r]);
    for (auto& v : o) v = Vec::zero();
    for (int64_t t = 0; t < n; ++t) {
      const float* vr = vc + slots[t] * row;
      for (int64_t c = 0; c < C; ++c) {
        const T vv = Vec::load(vr + L * c);
        for (int64_t r = 0; r < nr; ++r)
          o[r * C + c] = Vec::fmadd(Vec::set1(scores[(r0 + r) * ld + t]), vv, o[r * C + c]);
      }
    }
    for (int64_t r = 0; r < nr; ++r) {
      const T vi = Vec::set1(inv[r0 + r]);
      for (int64_t c = 0; c < C; ++c) Vec::store(out[r0 + r] + L * c, Vec::mul(o[r * C + c], vi));
    }
  }
}

// out[t, i] = silu(g) * u for g = gu[t, i], u = gu[t, I + i]; silu(g) = g / (1 + exp(-g)),
// with exp of -|g| only (the polynomial's range): g * e / (1 + e) for g < 0
void silu_mul(const float* gu, int64_t T, int64_t I, float* out) {
  constexpr int L = Vec::L;
  const Vec::T one = Vec::set1(1.0f);
  for (int64_t t = 0; t < T; ++t) {
    const float* g = gu + t * 2 * I;
    const float* u = g + I;
    for (int64_t i = 0; i < I; i += L) {
      const int64_t n = std::min<int64_t>(L, I - i);
      const Vec::T gv = n == L ? Vec::load(g + i) : Vec::load_n(g + i, n);
      const Vec::T uv = n == L ? Vec::load(u + i) : Vec::load_n(u + i, n);
      const Vec::T e = Vec::exp(Vec::min(gv, Vec::sub(Vec::zero(), gv)));  // exp(-|g|)
      const Vec::T num = Vec::select_neg(gv, Vec::mul(gv, e), gv);         // g < 0: g * e
      const Vec::T r = Vec::mul(Vec::div(num, Vec::add(one, e)), uv);
      if (n == L) Vec::store(out + t * I + i, r); else Vec::store_n(out + t * I + i, n, r);
    }
  }
}
#endif

}  // namespace

namespace promptcache {

void silu_mul_rows(const float* gu, int64_t T, int64_t I, float* out) {
#if defined(__AVX2__) && defined(__FMA__)
  silu_mul(gu, T, I, out);
#else
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = 0; i < I; ++i) {
      const float g = gu[t * 2 * I + i];
      out[t * I + i] = (g / (1.0f + std::exp(-g))) * gu[t * 2 * I + I + i];
    }
#endif
}

void attend_rows(const float* const* q, float* const* out, const int64_t* nk, int64_t R,
                 int64_t D, const int64_t* slots, const float* kc, const float* vc, int64_t row,
                 float scale, float* scores, int64_t ld) {
#if defined(__AVX2__) && defined(__FMA__)
  attend(q, out, nk, R, D, slots, kc, vc, row, scale, scores, ld);
#else
  // scalar: the same steps, one lane
  for (int64_t r = 0; r < R; ++r) {
    float* s = scores + r * ld;
    float mx = -INFINITY;
    for (int64_t t = 0; t < nk[r]; ++t) {
      float d = 0;
      for (int64_t i = 0; i < D; ++i) d += q[r][i] * kc[slots[t] * row + i];
      s[t] = d * scale;
      mx = std::max(mx, s[t]);
    }
    float sum = 0;
    for (int64_t t = 0; t < nk[r]; ++t) sum += (s[t] = std::exp(s[t] - mx));
    for (int64_t i = 0; i < D; ++i) {
      float o = 0;
      for (int64_t t = 0; t < nk[r]; ++t) o += s[t] * vc[slots[t] * row + i];
      out[r][i] = o / sum;
    }
  }
#endif
}

}  // namespace promptcache
