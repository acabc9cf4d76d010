// The Python module: tensor checks, outputs, and the calls into the kernels (kernels.h). The
// only file that includes torch: pybind11's tensor casters and ATen's Tensor, not
// torch/extension.h (which alone takes ~55 s to compile on a 2-core box).
//
// Compiled at -O1 (the kernels at -O3): the glue's time goes to checks and pybind11's casters,
// and -O1 halves this file's compile time, the longest of the build (measured with g++ 12:
// 43 s -> 20 s on a loaded 2-core box).
#pragma GCC optimize("O1")

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <torch/csrc/utils/pybind.h>

#include <optional>
#include <string>
#include <vector>

#include "kernels.h"

namespace {

namespace pc = promptcache;

void check_x(const at::Tensor& x, int64_t K, const char* name) {
  TORCH_CHECK(x.dim() == 2 && x.size(1) == K, name, ": x must be [M, ", K, "], got ", x.sizes());
  TORCH_CHECK(x.scalar_type() == at::kFloat, name, ": x must be float32, got ", x.scalar_type());
  TORCH_CHECK(x.stride(1) == 1, name, ": x rows must be contiguous");
  TORCH_CHECK(x.device().is_cpu(), name, ": CPU tensors only");
}

void check_n(int64_t N, int64_t P, const char* name) {
  TORCH_CHECK(N <= P * pc::NB && N > (P - 1) * pc::NB, name, ": N=", N, " does not match ", P,
              " panels");
}

// A linear's weight tensors (kind 0 float32, 1 bfloat16, 2 int8 panels) checked and read as
// the kernels take them; `k` is the input features (x's width).
pc::PanelWeight panel_weight(int64_t kind, int64_t N, int64_t k, const at::Tensor& a,
                             const at::Tensor& b, const at::Tensor& c, const char* name) {
  pc::PanelWeight lin;
  lin.kind = kind, lin.n = N, lin.k = k;
  TORCH_CHECK(a.is_contiguous() && a.device().is_cpu(), name, ": packed must be contiguous");
  if (kind == 0) {
    TORCH_CHECK(a.dim() == 3 && a.size(2) == pc::NB && a.scalar_type() == at::kFloat &&
                    a.size(1) == k,
                name, ": packed must be float32 [N/32, ", k, ", 32], got ", a.sizes());
    lin.w = a.data_ptr<float>();
  } else if (kind == 1) {
    TORCH_CHECK(pc::has_bf16_kernel(), name, ": no bfloat16 kernel in this build (", pc::isa(), ")");
    TORCH_CHECK(a.dim() == 4 && a.size(2) == pc::NB && a.size(3) == 2 &&
                    a.scalar_type() == at::kBFloat16 && a.size(1) == (k + 1) / 2,
                name, ": packed must be bfloat16 [N/32, ceil(", k, "/2), 32, 2], got ", a.sizes());
    lin.w = a.data_ptr<at::BFloat16>();
  } else if (kind == 2) {
    TORCH_CHECK(pc::has_int8_kernel(), name, ": no int8 kernel in this build (", pc::isa(), ")");
    TORCH_CHECK(a.dim() == 4 && a.size(2) == pc::NB && a.size(3) == 4 &&
                    a.scalar_type() == at::kChar && a.size(1) == (k + 3) / 4,
                name, ": packed must be int8 [N/32, ceil(", k, "/4), 32, 4], got ", a.sizes());
    const int64_t n = a.size(0) * pc::NB;
    TORCH_CHECK(b.numel() == n && b.scalar_type() == at::kInt && b.is_contiguous(), name,
                ": wsum must be int32 [N/32*32]");
    TORCH_CHECK(c.numel() == n && c.scalar_type() == at::kFloat && c.is_contiguous(), name,
                ": scale must be float32 [N/32*32]");
    lin.w = a.data_ptr<int8_t>();
    lin.wsum = b.data_ptr<int32_t>();
    lin.scale = c.data_ptr<float>();
  } else {
    TORCH_CHECK(false, name, ": unknown linear kind ", kind);
  }
  check_n(N, a.size(0), name);
  return lin;
}

at::Tensor run(const pc::PanelWeight& lin, const at::Tensor& x, const char* name) {
  check_x(x, lin.k, name);
  at::Tensor y = at::empty({x.size(0), lin.n}, x.options());
  pc::run_linear(lin, x.data_ptr<float>(), x.stride(0), x.size(0), y.data_ptr<float>());
  return y;
}

// x float32 [M, K]; packed float32 [N/32, K, 32]; returns float32 [M, N]
at::Tensor linear_f32(const at::Tensor& x, const at::Tensor& packed, int64_t N) {
  TORCH_CHECK(packed.dim() == 3, "linear_f32: packed must be float32 [N/32, K, 32]");
  return run(panel_weight(0, N, packed.size(1), packed, {}, {}, "linear_f32"), x, "linear_f32");
}

// x float32 [M, K] (rounded to bfloat16 here); packed bfloat16 [N/32, ceil(K/2), 32, 2]
at::Tensor linear_bf16(const at::Tensor& x, const at::Tensor& packed, int64_t N) {
  TORCH_CHECK(x.dim() == 2, "linear_bf16: x must be [M, K]");
  return run(panel_weight(1, N, x.size(1), packed, {}, {}, "linear_bf16"), x, "linear_bf16");
}

// x float32 [M, K]; packed int8 [N/32, ceil(K/4), 32, 4], wsum int32 and scale float32 [N/32*32]
at::Tensor linear_int8(const at::Tensor& x, const at::Tensor& packed, const at::Tensor& wsum,
                       const at::Tensor& scale, int64_t N) {
  TORCH_CHECK(x.dim() == 2, "linear_int8: x must be [M, K]");
  return run(panel_weight(2, N, x.size(1), packed, wsum, scale, "linear_int8"), x, "linear_int8");
}

pc::Index index_of(const at::Tensor& t) {
  TORCH_CHECK(t.scalar_type() == at::kInt || t.scalar_type() == at::kLong,
              "decode_layer: index tensors must be int32 or int64");
  TORCH_CHECK(t.dim() <= 2 && (t.dim() == 0 || t.stride(-1) == 1),
              "decode_layer: index rows must be contiguous");
  pc::Index ix;
  if (t.scalar_type() == at::kInt) ix.p32 = t.data_ptr<int32_t>(); else ix.p64 = t.data_ptr<int64_t>();
  ix.stride = t.dim() == 2 ? t.stride(0) : 0;
  return ix;
}

// One decoder layer (decode.cpp); returns (mlp_out, residual) float32 [T, hidden]
std::vector<at::Tensor> decode_layer(
    const at::Tensor& x, const std::optional<at::Tensor>& residual, const at::Tensor& positions,
    const at::Tensor& cos, const at::Tensor& sin, const at::Tensor& k_cache,
    const at::Tensor& v_cache, const at::Tensor& slot_mapping, const at::Tensor& block_tables,
    const at::Tensor& cu_seqlens_q, const at::Tensor& seq_lens, const at::Tensor& w_in,
    const at::Tensor& w_post, double eps, const std::vector<at::Tensor>& lin,
    const std::vector<int64_t>& lin_meta, int64_t num_heads, int64_t num_kv_heads,
    double scale) {
  TORCH_CHECK(x.dim() == 2 && x.scalar_type() == at::kFloat && x.is_contiguous() && x.device().is_cpu(),
              "decode_layer: x must be contiguous float32 [T, hidden] on the CPU");
  TORCH_CHECK(lin.size() == 12 && lin_meta.size() == 8, "decode_layer: 4 linears expected");
  TORCH_CHECK(k_cache.dim() == 4 && k_cache.scalar_type() == at::kFloat && k_cache.is_contiguous() &&
                  v_cache.sizes() == k_cache.sizes() && v_cache.is_contiguous() &&
                  v_cache.scalar_type() == at::kFloat,
              "decode_layer: float32 contiguous caches [blocks, block_size, kv_heads, head_dim]");
  const int64_t T = x.size(0), H = x.size(1);
  const int64_t KV = k_cache.size(2), D = k_cache.size(3);
  TORCH_CHECK(KV == num_kv_heads && num_heads % KV == 0 && D % 16 == 0 && D <= pc::MAX_HEAD_DIM,
              "decode_layer: heads/head_dim unsupported");
  TORCH_CHECK(cos.scalar_type() == at::kFloat && cos.is_contiguous() && cos.dim() == 2 &&
                  cos.size(1) == D && sin.sizes() == cos.sizes() && sin.is_contiguous() &&
                  sin.scalar_type() == at::kFloat,
              "decode_layer: cos/sin must be float32 [max_pos, head_dim]");
  TORCH_CHECK(w_in.numel() == H && w_post.numel() == H && w_in.scalar_type() == at::kFloat &&
                  w_post.scalar_type() == at::kFloat && w_in.is_contiguous() && w_post.is_contiguous(),
              "decode_layer: norm weights must be float32 [hidden]");
  if (residual.has_value())
    TORCH_CHECK(residual->sizes() == x.sizes() && residual->scalar_type() == at::kFloat &&
                    residual->is_contiguous(),
                "decode_layer: residual must be contiguous float32 like x");
  const int64_t qsz = num_heads * D, width = qsz + 2 * KV * D;
  pc::LayerArgs a;
  const int64_t ins[4] = {H, qsz, H, -1};  // down_proj's input: half of gate_up's output
  const char* names[4] = {"decode_layer qkv", "decode_layer o_proj", "decode_layer gate_up",
                          "decode_layer down"};
  for (int i = 0; i < 4; ++i) {
    const int64_t k = i == 3 ? a.lin[2].n / 2 : ins[i];
    a.lin[i] = panel_weight(lin_meta[2 * i], lin_meta[2 * i + 1], k, lin[3 * i], lin[3 * i + 1],
                            lin[3 * i + 2], names[i]);
  }
  TORCH_CHECK(a.lin[0].n == width && a.lin[1].n == H && a.lin[2].n % 2 == 0 && a.lin[3].n == H,
              "decode_layer: linear widths do not match the hidden size and heads");
  TORCH_CHECK(positions.numel() == T && slot_mapping.numel() == T, "decode_layer: positions and "
              "slot_mapping must have one entry a row");
  const int64_t S = seq_lens.numel();
  TORCH_CHECK(cu_seqlens_q.numel() == S + 1 && block_tables.dim() == 2 && block_tables.size(0) >= S,
              "decode_layer: cu_seqlens_q [S+1], block_tables [S, max_blocks], seq_lens [S]");
  a.positions = index_of(positions), a.slot_mapping = index_of(slot_mapping);
  a.block_tables = index_of(block_tables), a.cu_seqlens_q = index_of(cu_seqlens_q);
  a.seq_lens = index_of(seq_lens);
  for (int64_t i = 0; i < S; ++i) {
    const int64_t qlen = a.cu_seqlens_q(i + 1) - a.cu_seqlens_q(i), ctx = a.seq_lens(i);
    TORCH_CHECK(qlen <= ctx, "decode_layer: a sequence has more new tokens than context");
    TORCH_CHECK(ctx <= block_tables.size(1) * k_cache.size(1),
                "decode_layer: a context is longer than its block table");
  }
  TORCH_CHECK(a.cu_seqlens_q(S) == T, "decode_layer: cu_seqlens_q must end at the row count");
  at::Tensor out = at::empty({T, H}, x.options()), h2 = at::empty({T, H}, x.options());
  a.x = x.data_ptr<float>();
  a.residual = residual.has_value() ? residual->data_ptr<float>() : nullptr;
  a.T = T, a.H = H, a.num_seqs = S;
  a.cos = cos.data_ptr<float>(), a.sin = sin.data_ptr<float>();
  a.k_cache = k_cache.data_ptr<float>(), a.v_cache = v_cache.data_ptr<float>();
  a.block_size = k_cache.size(1), a.num_kv_heads = KV, a.head_dim = D, a.num_heads = num_heads;
  a.w_in = w_in.data_ptr<float>(), a.w_post = w_post.data_ptr<float>();
  a.eps = (float)eps, a.scale = (float)scale;
  a.out = out.data_ptr<float>(), a.h2 = h2.data_ptr<float>();
  pc::decode_layer(a);
  return {out, h2};
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("isa", [] { return std::string(pc::isa()); }, "the instruction set this build was compiled for");
  m.def("linear_f32", &linear_f32, "float32 small-M linear over a panel-packed weight");
  m.def("linear_bf16", &linear_bf16, "bfloat16-weight small-M linear");
  m.def("linear_int8", &linear_int8, "int8-weight small-M linear, fbgemm's arithmetic");
  m.def("decode_layer", &decode_layer, "one Llama decoder layer for a few rows (decode.cpp)");
}
