// run_linear (kernels.h): one linear of any kind over its panels, the activations converted
// (bfloat16 rounding, uint8 quantization) once a call, the panels split over threads only for
// calls worth ~2 ms (threads.cpp).
#include <algorithm>
#include <vector>

#include "kernels.h"

namespace promptcache {

void run_linear(const PanelWeight& lin, const float* x, int64_t ldx, int64_t M, float* y) {
  const int64_t N = lin.n, K = lin.k, P = (N + NB - 1) / NB;
  if (M == 0 || N == 0) return;
  // one thread streams ~20 GB/s of weights and ~100 GFLOP/s (float32 FMA-equivalent: the
  // bfloat16 and int8 dot products do 2 and 4 products a lane)
  auto us = [&](double bytes, double flops) { return std::max(bytes / 20e3, flops / 100e3); };
  if (lin.kind == 0) {
    const float* w = static_cast<const float*>(lin.w);
    for_panels(P, us(4.0 * P * K * NB, 2.0 * M * P * K * NB), [&](int64_t p0, int64_t p1) {
      linear_f32(x, ldx, M, w, K, N, y, N, p0, p1);
    });
  } else if (lin.kind == 1) {
    const int64_t K2 = (K + 1) / 2;
    std::vector<uint16_t> xb(M * 2 * K2);
    round_bf16_rows(x, ldx, M, K, xb.data());
    const uint16_t* w = static_cast<const uint16_t*>(lin.w);
    for_panels(P, us(4.0 * P * K2 * NB, 2.0 * M * P * K2 * NB), [&](int64_t p0, int64_t p1) {
      linear_bf16(xb.data(), M, w, K2, N, y, N, p0, p1);
    });
  } else {
    const int64_t K4 = (K + 3) / 4;
    std::vector<uint8_t> xq(M * 4 * K4);
    std::vector<int32_t> zp(M);
    std::vector<float> sx(M);
    quantize_rows_u8(x, ldx, M, K, xq.data(), zp.data(), sx.data());
    const int8_t* w = static_cast<const int8_t*>(lin.w);
    for_panels(P, us(4.0 * P * K4 * NB, 2.0 * M * P * K4 * NB), [&](int64_t p0, int64_t p1) {
      linear_int8(xq.data(), zp.data(), sx.data(), M, w, K4, lin.wsum, lin.scale, N, y, N, p0, p1);
    });
  }
}

}  // namespace promptcache

namespace promptcache {

const char* isa() {
#if defined(__AVX512F__) && defined(__AVX512BF16__) && defined(__AVX512VNNI__)
  return "avx512+bf16+vnni";
#elif defined(__AVX512F__) && defined(__AVX512BF16__)
  return "avx512+bf16";
#elif defined(__AVX512F__) && defined(__AVX512VNNI__)
  return "avx512+vnni";
#elif defined(__AVX512F__)
  return "avx512";
#elif defined(__AVX2__) && defined(__FMA__) && defined(__AVXVNNI__)
  return "avx2+vnni";
#elif defined(__AVX2__) && defined(__FMA__)
  return "avx2";
#else
  return "scalar";
#endif
}

}  // namespace promptcache
