// One Llama decoder layer for a few rows (a batch-1 or small-batch decode step, a speculative
// verification) in one call, float32 activations and float32 paged KV cache (kernels.h,
// decode_layer; bindings.cpp checks the tensors):
//
//   h = x + residual; a = rmsnorm(h) * w_in
//   qkv = a @ Wqkv^T; rotate q, k (rotate-half, the torch path's roundings); write k, v at
//   slot_mapping; o = paged attention of q over each sequence's context (GQA: query head h
//   reads KV head h / group; query j of a sequence with q_len new tokens sits at position
//   ctx - q_len + j and sees keys 0..that position)
//   h2 = o @ Wo^T + h; b = rmsnorm(h2) * w_post; g, u = b @ Wgu^T; out = (silu(g) * u) @ Wd^T
//
// the arithmetic of local_engine/models/llama.py over ops/torch_ops.py and
// attention/torch_ref.py, with the linears of linear_*.cpp. Python issues ~50 torch calls per
// layer for this at 1-2 us each; here it is one. Scratch buffers are per thread and reused.
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels.h"

namespace {

using promptcache::Index;

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

// rotary on q and k heads of each row (qkv [T, width]), then k, v written at the slots
void rotary_and_write(const promptcache::LayerArgs& a, float* qkv, int64_t width) {
  const int64_t D = a.head_dim, half = D / 2, qsz = a.num_heads * D, kvsz = a.num_kv_heads * D;
  float tmp[promptcache::MAX_HEAD_DIM];
  for (int64_t t = 0; t < a.T; ++t) {
    const float* c = a.cos + a.positions(t) * D;
    const float* s = a.sin + a.positions(t) * D;
    for (int64_t hh = 0; hh < a.num_heads + a.num_kv_heads; ++hh) {  // q heads then k heads
      float* v = qkv + t * width + hh * D;
      for (int64_t i = 0; i < D; ++i) {
        // x * cos + swapped * [-sin, sin]: two products and a sum, as the torch path rounds
        const float sw = i < half ? v[i + half] * -s[i] : v[i - half] * s[i];
        tmp[i] = v[i] * c[i] + sw;
      }
      std::memcpy(v, tmp, D * sizeof(float));
    }
    const int64_t sl = a.slot_mapping(t);
    if (sl >= 0) {
      std::memcpy(a.k_cache + sl * kvsz, qkv + t * width + qsz, kvsz * sizeof(float));
      std::memcpy(a.v_cache + sl * kvsz, qkv + t * width + qsz + kvsz, kvsz * sizeof(float));
    }
  }
}

// attention of every sequence's new rows over its context, into attn [T, qsz]
void paged_attention(const promptcache::LayerArgs& a, const float* qkv, int64_t width, float* attn) {
  const int64_t D = a.head_dim, KV = a.num_kv_heads, group = a.num_heads / KV;
  const int64_t qsz = a.num_heads * D, kvsz = KV * D, bs = a.block_size;
  int64_t max_ctx = 1;
  for (int64_t i = 0; i < a.num_seqs; ++i) max_ctx = std::max(max_ctx, a.seq_lens(i));
  // on the calling thread: at decode sizes a parallel region costs more than it saves on a
  // busy machine (threads.cpp); 9 heads over 2,000 keys are ~0.1 ms a layer
  const int64_t ld = (max_ctx + 15) / 16 * 16;
  thread_local std::vector<float> scores;
  thread_local std::vector<int64_t> slots, nk;
  thread_local std::vector<const float*> qrows;
  thread_local std::vector<float*> orows;
  for (int64_t i = 0; i < a.num_seqs; ++i) {
    const int64_t q0 = a.cu_seqlens_q(i), qlen = a.cu_seqlens_q(i + 1) - q0, ctx = a.seq_lens(i);
    if (qlen == 0) continue;
    slots.resize(ctx);
    for (int64_t k = 0; k < ctx; ++k) slots[k] = a.block_tables(i, k / bs) * bs + k % bs;
    const int64_t R = qlen * group;
    if ((int64_t)scores.size() < R * ld) scores.resize(R * ld);
    qrows.resize(R), orows.resize(R), nk.resize(R);
    for (int64_t g = 0; g < KV; ++g) {
      // row j * group + h: query head g * group + h of new token j, at position ctx - qlen + j
      for (int64_t j = 0; j < qlen; ++j)
        for (int64_t hh = 0; hh < group; ++hh) {
          const int64_t r = j * group + hh, head = g * group + hh;
          qrows[r] = qkv + (q0 + j) * width + head * D;
          orows[r] = attn + (q0 + j) * qsz + head * D;
          nk[r] = ctx - qlen + j + 1;
        }
      promptcache::attend_rows(qrows.data(), orows.data(), nk.data(), R, D, slots.data(),
                               a.k_cache + g * D, a.v_cache + g * D, kvsz, a.scale,
                               scores.data(), ld);
    }
  }
}

}  // namespace

namespace promptcache {

void decode_layer(const LayerArgs& a) {
  const int64_t T = a.T, H = a.H, D = a.head_dim;
  const int64_t qsz = a.num_heads * D, width = qsz + 2 * a.num_kv_heads * D;
  const int64_t I = a.lin[2].n / 2;
  thread_local std::vector<float> h, norm, qkv, attn, gu, act;
  h.resize(T * H), norm.resize(T * H), qkv.resize(T * width), attn.resize(T * qsz);
  gu.resize(T * 2 * I), act.resize(T * I);

  // 1. residual add + input norm
  for (int64_t i = 0; i < T * H; ++i) h[i] = a.residual ? a.x[i] + a.residual[i] : a.x[i];
  rms_norm_rows(h.data(), a.w_in, a.eps, T, H, norm.data());
  // 2. qkv, rotary, KV write; 3. paged attention
  run_linear(a.lin[0], norm.data(), H, T, qkv.data());
  rotary_and_write(a, qkv.data(), width);
  paged_attention(a, qkv.data(), width, attn.data());
  // 4. o_proj + residual + post norm
  run_linear(a.lin[1], attn.data(), qsz, T, a.h2);
  for (int64_t i = 0; i < T * H; ++i) a.h2[i] += h[i];
  rms_norm_rows(a.h2, a.w_post, a.eps, T, H, norm.data());
  // 5. MLP: gate_up into gu [T, 2I], silu(g) * u into act [T, I]
  run_linear(a.lin[2], norm.data(), H, T, gu.data());
  silu_mul_rows(gu.data(), T, I, act.data());
  run_linear(a.lin[3], act.data(), I, T, a.out);
}

}  // namespace promptcache
