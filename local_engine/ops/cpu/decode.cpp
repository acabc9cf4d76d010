// One Llama decoder layer for a few rows (a batch-1 or small-batch decode step, a speculative
// verification) in one call, float32 activations and float32 paged KV cache:
//
//   h = x + residual; a = rmsnorm(h) * w_in
//   qkv = a @ Wqkv^T; rotate q, k (rotate-half, the torch path's roundings); write k, v at
//   slot_mapping; o = paged attention of q over each sequence's context (GQA: query head h
//   reads KV head h / group; query j of a sequence with q_len new tokens sits at position
//   ctx - q_len + j and sees keys 0..that position)
//   h2 = o @ Wo^T + h; b = rmsnorm(h2) * w_post; g, u = b @ Wgu^T; out = (silu(g) * u) @ Wd^T
//   returns (out, h2)
//
// the arithmetic of local_engine/models/llama.py over ops/torch_ops.py and
// attention/torch_ref.py, with the linears of linear.cpp (each linear: kind 0 float32 panels,
// 1 bfloat16 panels, 2 int8 panels). Python issues ~50 torch calls per layer for this at 1-2 us
// each; here it is one. Attention is exact softmax in float32 (max-subtracted, a polynomial
// exp within 2 ulp), all query rows of a (sequence, KV head) together (attend_rows).
#include <torch/extension.h>
#include <immintrin.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "kernels.h"

namespace {

struct Index {  // an int32 or int64 tensor read as int64
  const int32_t* p32 = nullptr;
  const int64_t* p64 = nullptr;
  int64_t stride = 0;
  explicit Index(const at::Tensor& t) {
    TORCH_CHECK(t.scalar_type() == at::kInt || t.scalar_type() == at::kLong,
                "decode_layer: index tensors must be int32 or int64");
    TORCH_CHECK(t.dim() <= 1 || t.stride(-1) == 1, "decode_layer: index rows must be contiguous");
    if (t.scalar_type() == at::kInt) p32 = t.data_ptr<int32_t>(); else p64 = t.data_ptr<int64_t>();
    stride = t.dim() == 2 ? t.stride(0) : 0;
  }
  int64_t operator()(int64_t i) const { return p32 ? p32[i] : p64[i]; }
  int64_t operator()(int64_t r, int64_t c) const { return (*this)(r * stride + c); }
};

at::Tensor run_linear(int64_t kind, int64_t n, const at::Tensor& a, const at::Tensor& b,
                      const at::Tensor& c, const at::Tensor& x) {
  switch (kind) {
    case 0: return promptcache::linear_f32(x, a, n);
    case 1: return promptcache::linear_bf16(x, a, n);
    case 2: return promptcache::linear_int8(x, a, b, c, n);
  }
  TORCH_CHECK(false, "decode_layer: unknown linear kind ", kind);
}

// rmsnorm of each row of h [T, H] into out: h * (1 / sqrt(mean(h^2) + eps)) * w
void rms_norm_rows(const float* h, const float* w, float eps, int64_t T, int64_t H, float* out) {
  for (int64_t t = 0; t < T; ++t) {
    const float* r = h + t * H;
    double ss = 0;  // float64 sum: the mean of squares without float32 cancellation worries
    for (int64_t i = 0; i < H; ++i) ss += (double)r[i] * r[i];
    const float rstd = 1.0f / std::sqrt((float)(ss / H) + eps);
    for (int64_t i = 0; i < H; ++i) out[t * H + i] = (r[i] * rstd) * w[i];
  }
}

#if defined(__AVX512F__)
// exp(x) for x <= 0 (softmax's exponents): 2^n * p(r), r = x - n ln 2, Cephes' expf polynomial
inline __m512 exp512(__m512 x) {
  x = _mm512_max_ps(x, _mm512_set1_ps(-87.0f));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  return _mm512_scalef_ps(p, n);
}

// The 16 sums of v[0..15] (each over its 16 lanes) as one vector, in order: a transpose-and-add
// tree (8 + 4 + 2 + 1 shuffle pairs) instead of 16 horizontal reductions.
inline __m512 sum16(__m512* v) {
  __m512 t[8], w[4], x[2];
  for (int i = 0; i < 8; ++i)  // per 128-bit lane: (a0+a2, b0+b2, a1+a3, b1+b3)
    t[i] = _mm512_add_ps(_mm512_unpacklo_ps(v[2 * i], v[2 * i + 1]),
                         _mm512_unpackhi_ps(v[2 * i], v[2 * i + 1]));
  for (int i = 0; i < 4; ++i) {  // per 128-bit lane: the lane's sums of 4 vectors, in order
    const __m512d a = _mm512_castps_pd(t[2 * i]), b = _mm512_castps_pd(t[2 * i + 1]);
    w[i] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(a, b)),
                         _mm512_castpd_ps(_mm512_unpackhi_pd(a, b)));
  }
  for (int i = 0; i < 2; ++i)  // lanes (0+1, 2+3) of w[2i] then of w[2i+1]
    x[i] = _mm512_add_ps(_mm512_shuffle_f32x4(w[2 * i], w[2 * i + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                         _mm512_shuffle_f32x4(w[2 * i], w[2 * i + 1], _MM_SHUFFLE(3, 1, 3, 1)));
  return _mm512_add_ps(_mm512_shuffle_f32x4(x[0], x[1], _MM_SHUFFLE(2, 0, 2, 0)),
                       _mm512_shuffle_f32x4(x[0], x[1], _MM_SHUFFLE(3, 1, 3, 1)));
}

constexpr int64_t MAX_D = 256;  // head_dim up to this (16 vectors a row)

// One (sequence, KV head): R query rows (the group's query heads of each new token) over the
// keys at `slots`; row r sees keys 0..nk[r]-1 (its causal prefix). Every key tile of 16 is
// read from the cache once per row while it sits in L1 (scores: 16 dot products a row, summed
// by sum16), and every value row once per 4-row block (outputs: fused multiply-adds into
// the block's accumulators). `scores` holds R x ld floats (ld >= max nk rounded up to 16).
void attend_rows(const float* const* q, float* const* out, const int64_t* nk, int64_t R,
                 int64_t D, const int64_t* slots, const float* kc, const float* vc, int64_t row,
                 float scale, float* scores, int64_t ld) {
  const int64_t C = D / 16;
  int64_t max_nk = 0;
  for (int64_t r = 0; r < R; ++r) max_nk = std::max(max_nk, nk[r]);
  const __m512 vscale = _mm512_set1_ps(scale);
  // 1. scores, tile by tile (keys past a row's nk are computed over slot 0 and ignored)
  __m512 acc[16];
  for (int64_t t0 = 0; t0 < max_nk; t0 += 16) {
    const float* kt[16];
    for (int i = 0; i < 16; ++i) kt[i] = kc + slots[t0 + i < max_nk ? t0 + i : 0] * row;
    for (int64_t r = 0; r < R; ++r) {
      if (t0 >= nk[r]) continue;
      const float* qr = q[r];
      for (int i = 0; i < 16; ++i) acc[i] = _mm512_setzero_ps();
      for (int64_t c = 0; c < C; ++c) {
        const __m512 qv = _mm512_loadu_ps(qr + 16 * c);
        for (int i = 0; i < 16; ++i)
          acc[i] = _mm512_fmadd_ps(qv, _mm512_loadu_ps(kt[i] + 16 * c), acc[i]);
      }
      _mm512_storeu_ps(scores + r * ld + t0, _mm512_mul_ps(sum16(acc), vscale));
    }
  }
  // 2. softmax of each row over its nk keys (max-subtracted); zeros past nk to the tile end
  std::vector<float> inv(R);
  for (int64_t r = 0; r < R; ++r) {
    float* s = scores + r * ld;
    const int64_t n = nk[r];
    float mx = -INFINITY;
    for (int64_t t = 0; t < n; ++t) mx = std::max(mx, s[t]);
    __m512 sum = _mm512_setzero_ps();
    const __m512 vmx = _mm512_set1_ps(mx);
    int64_t t = 0;
    for (; t + 16 <= n; t += 16) {
      const __m512 e = exp512(_mm512_sub_ps(_mm512_loadu_ps(s + t), vmx));
      _mm512_storeu_ps(s + t, e);
      sum = _mm512_add_ps(sum, e);
    }
    if (t < n) {
      const __mmask16 m = (__mmask16)((1u << (n - t)) - 1);
      const __m512 e = exp512(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, s + t), vmx));
      _mm512_mask_storeu_ps(s + t, m, e);
      sum = _mm512_add_ps(sum, _mm512_maskz_mov_ps(m, e));
    }
    for (int64_t z = n; z < max_nk; ++z) s[z] = 0.0f;
    inv[r] = 1.0f / _mm512_reduce_add_ps(sum);
  }
  // 3. outputs: blocks of rows x C accumulators (at most 24 vectors), one pass over the values
  const int64_t RB = std::max<int64_t>(1, std::min<int64_t>(4, 24 / C));
  std::vector<__m512> o(RB * C);
  for (int64_t r0 = 0; r0 < R; r0 += RB) {
    const int64_t nr = std::min(RB, R - r0);
    int64_t n = 0;
    for (int64_t r = r0; r < r0 + nr; ++r) n = std::max(n, nk[r]);
    for (auto& v : o) v = _mm512_setzero_ps();
    for (int64_t t = 0; t < n; ++t) {
      const float* vr = vc + slots[t] * row;
      for (int64_t c = 0; c < C; ++c) {
        const __m512 vv = _mm512_loadu_ps(vr + 16 * c);
        for (int64_t r = 0; r < nr; ++r)
          o[r * C + c] =
              _mm512_fmadd_ps(_mm512_set1_ps(scores[(r0 + r) * ld + t]), vv, o[r * C + c]);
      }
    }
    for (int64_t r = 0; r < nr; ++r) {
      const __m512 vi = _mm512_set1_ps(inv[r0 + r]);
      for (int64_t c = 0; c < C; ++c)
        _mm512_storeu_ps(out[r0 + r] + 16 * c, _mm512_mul_ps(o[r * C + c], vi));
    }
  }
}
#endif

std::vector<at::Tensor> decode_layer(
    const at::Tensor& x, const c10::optional<at::Tensor>& residual, const at::Tensor& positions,
    const at::Tensor& cos, const at::Tensor& sin, const at::Tensor& k_cache,
    const at::Tensor& v_cache, const at::Tensor& slot_mapping, const at::Tensor& block_tables,
    const at::Tensor& cu_seqlens_q, const at::Tensor& seq_lens, const at::Tensor& w_in,
    const at::Tensor& w_post, double eps, const std::vector<at::Tensor>& lin,
    const std::vector<int64_t>& lin_meta, int64_t num_heads, int64_t num_kv_heads,
    double scale) {
#if defined(__AVX512F__)
  TORCH_CHECK(x.dim() == 2 && x.scalar_type() == at::kFloat && x.is_contiguous(),
              "decode_layer: x must be contiguous float32 [T, hidden]");
  TORCH_CHECK(lin.size() == 12 && lin_meta.size() == 8, "decode_layer: 4 linears expected");
  TORCH_CHECK(k_cache.dim() == 4 && k_cache.scalar_type() == at::kFloat && k_cache.is_contiguous() &&
                  v_cache.sizes() == k_cache.sizes() && v_cache.is_contiguous() &&
                  v_cache.scalar_type() == at::kFloat,
              "decode_layer: float32 contiguous caches [blocks, block_size, kv_heads, head_dim]");
  const int64_t T = x.size(0), H = x.size(1);
  const int64_t bs = k_cache.size(1), KV = k_cache.size(2), D = k_cache.size(3);
  TORCH_CHECK(KV == num_kv_heads && num_heads % KV == 0 && D % 16 == 0 && D <= MAX_D,
              "decode_layer: heads/head_dim unsupported");
  TORCH_CHECK(cos.scalar_type() == at::kFloat && cos.is_contiguous() && cos.size(1) == D &&
                  sin.sizes() == cos.sizes() && sin.is_contiguous(),
              "decode_layer: cos/sin must be float32 [max_pos, head_dim]");
  const int64_t group = num_heads / KV, qsz = num_heads * D, kvsz = KV * D;
  const float feps = (float)eps;

  // 1. residual add + input norm
  at::Tensor h = residual.has_value() ? at::add(x, *residual) : x;
  at::Tensor a = at::empty({T, H}, x.options());
  rms_norm_rows(h.data_ptr<float>(), w_in.data_ptr<float>(), feps, T, H, a.data_ptr<float>());

  // 2. qkv, rotary, KV write
  at::Tensor qkv = run_linear(lin_meta[0], lin_meta[1], lin[0], lin[1], lin[2], a);
  TORCH_CHECK(qkv.size(1) == qsz + 2 * kvsz, "decode_layer: qkv width mismatch");
  float* qp = qkv.data_ptr<float>();
  const float* cp = cos.data_ptr<float>();
  const float* sp = sin.data_ptr<float>();
  const Index pos(positions), slot(slot_mapping), bt(block_tables), cu(cu_seqlens_q), lens(seq_lens);
  const int64_t half = D / 2, width = qsz + 2 * kvsz;
  std::vector<float> tmp(D);
  float* kc = k_cache.data_ptr<float>();
  float* vc = v_cache.data_ptr<float>();
  for (int64_t t = 0; t < T; ++t) {
    const float* c = cp + pos(t) * D;
    const float* s = sp + pos(t) * D;
    for (int64_t hh = 0; hh < num_heads + KV; ++hh) {  // q heads then k heads
      float* v = qp + t * width + hh * D;
      for (int64_t i = 0; i < D; ++i) {
        // x * cos + swapped * [-sin, sin]: two products and a sum, as the torch path rounds
        const float sw = i < half ? v[i + half] * -s[i] : v[i - half] * s[i];
        tmp[i] = v[i] * c[i] + sw;
      }
      std::memcpy(v, tmp.data(), D * sizeof(float));
    }
    const int64_t sl = slot(t);
    if (sl >= 0) {
      std::memcpy(kc + sl * kvsz, qp + t * width + qsz, kvsz * sizeof(float));
      std::memcpy(vc + sl * kvsz, qp + t * width + qsz + kvsz, kvsz * sizeof(float));
    }
  }

  // 3. paged attention
  at::Tensor attn = at::empty({T, qsz}, x.options());
  float* op = attn.data_ptr<float>();
  const int64_t S = seq_lens.size(0);
  std::vector<std::vector<int64_t>> slots(S);
  int64_t max_ctx = 0;
  for (int64_t i = 0; i < S; ++i) {
    const int64_t ctx = lens(i);
    max_ctx = std::max(max_ctx, ctx);
    if (cu(i + 1) == cu(i)) continue;
    slots[i].resize(ctx);
    for (int64_t k = 0; k < ctx; ++k) slots[i][k] = bt(i, k / bs) * bs + k % bs;
  }
  // on the calling thread: at decode sizes a parallel region costs more than it saves on a
  // busy machine (linear.cpp, panels_for); 9 heads over 2,000 keys are ~0.1 ms a layer
  const int64_t ld = (std::max<int64_t>(max_ctx, 1) + 15) / 16 * 16;
  std::vector<float> scores;
  std::vector<const float*> qrows;
  std::vector<float*> orows;
  std::vector<int64_t> nk;
  for (int64_t i = 0; i < S; ++i) {
    const int64_t q0 = cu(i), qlen = cu(i + 1) - q0, ctx = lens(i);
    if (qlen == 0) continue;
    TORCH_CHECK(qlen <= ctx, "decode_layer: a sequence has more new tokens than context");
    const int64_t R = qlen * group;
    if ((int64_t)scores.size() < R * ld) scores.resize(R * ld);
    qrows.resize(R), orows.resize(R), nk.resize(R);
    for (int64_t g = 0; g < KV; ++g) {
      // row j * group + h: query head g * group + h of new token j, at position ctx - qlen + j
      for (int64_t j = 0; j < qlen; ++j)
        for (int64_t hh = 0; hh < group; ++hh) {
          const int64_t r = j * group + hh, head = g * group + hh;
          qrows[r] = qp + (q0 + j) * width + head * D;
          orows[r] = op + (q0 + j) * qsz + head * D;
          nk[r] = ctx - qlen + j + 1;
        }
      attend_rows(qrows.data(), orows.data(), nk.data(), R, D, slots[i].data(), kc + g * D,
                  vc + g * D, kvsz, (float)scale, scores.data(), ld);
    }
  }

  // 4. o_proj + residual + post norm
  at::Tensor h2 = run_linear(lin_meta[2], lin_meta[3], lin[3], lin[4], lin[5], attn);
  h2.add_(h);
  at::Tensor b = at::empty({T, H}, x.options());
  rms_norm_rows(h2.data_ptr<float>(), w_post.data_ptr<float>(), feps, T, H, b.data_ptr<float>());

  // 5. MLP
  at::Tensor gu = run_linear(lin_meta[4], lin_meta[5], lin[6], lin[7], lin[8], b);
  const int64_t I = gu.size(1) / 2;
  at::Tensor act = at::empty({T, I}, x.options());
  const float* gp = gu.data_ptr<float>();
  float* ap = act.data_ptr<float>();
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = 0; i < I; ++i) {
      const float g = gp[t * 2 * I + i];
      ap[t * I + i] = (g / (1.0f + std::exp(-g))) * gp[t * 2 * I + I + i];
    }
  at::Tensor out = run_linear(lin_meta[6], lin_meta[7], lin[9], lin[10], lin[11], act);
  return {out, h2};
#else
  TORCH_CHECK(false, "decode_layer: built without AVX-512");
#endif
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("isa", &promptcache::isa, "the instruction set this build was compiled for");
  m.def("linear_f32", &promptcache::linear_f32, "float32 small-M linear over a panel-packed weight");
  m.def("linear_bf16", &promptcache::linear_bf16, "bfloat16-weight small-M linear (AVX512-BF16)");
  m.def("linear_int8", &promptcache::linear_int8,
        "int8-weight small-M linear (AVX512-VNNI), fbgemm's arithmetic");
  m.def("decode_layer", &decode_layer, "one Llama decoder layer for a few rows (decode.cpp)");
}
