// Torch binding of the 1-byte-cache decode kernel (decode_1b.cuh holds the kernel and its
// design notes). Built by local_engine/attention/cuda_decode.py with torch.utils.cpp_extension.

#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/extension.h>

#include <mutex>
#include <vector>

#include "decode_1b.cuh"

namespace {
using namespace decode1b;

// occupancy != nullptr: no launch; *occupancy = the CTAs of this launch that fit on one SM
// (cudaOccupancyMaxActiveBlocksPerMultiprocessor, for the tests of DecodeConfig.ctas_per_sm)
template <int D, int STEPS, int WARPS, int STAGES, int KIND, typename QT>
void launch(const Params& p, int num_tokens, int num_kv_heads, int min_smem, cudaStream_t stream,
            int* occupancy = nullptr) {
  auto kern = decode_1b_kernel<D, STEPS, WARPS, STAGES, KIND, QT>;
  const int pipe = WARPS * STAGES * Smem<D, STEPS, KIND>::STAGE;
  const int merge = WARPS * GP * (D + 2) * 4;
  int smem = pipe > merge ? pipe : merge;
  // min_smem (DecodeConfig.ctas_per_sm): more than the kernel uses, so that fewer CTAs share
  // an SM (the caller checked it against the device's opt-in limit)
  if (min_smem > smem) smem = min_smem;
  int dev = 0;
  C10_CUDA_CHECK(cudaGetDevice(&dev));
  {
    // the shared-memory limit, per instantiation and device, only ever raised (to the largest
    // launch seen: a thread launching less never lowers it under another's larger launch);
    // the first launch of each size runs before any capture
    static std::mutex mu;
    static std::vector<int> attr_set;  // bytes set on device d
    std::lock_guard<std::mutex> lock(mu);
    if (attr_set.size() <= static_cast<size_t>(dev)) attr_set.resize(dev + 1, 0);
    if (attr_set[dev] < smem) {
      C10_CUDA_CHECK(
          cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
      attr_set[dev] = smem;
    }
  }
  if (occupancy != nullptr) {
    C10_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(occupancy, kern, WARPS * 32, smem));
    return;
  }
  dim3 grid(num_tokens, num_kv_heads, p.num_segments);
  kern<<<grid, WARPS * 32, smem, stream>>>(p);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

// The instantiated configurations: (STEPS, WARPS, STAGES). PROMPTCACHE_DECODE_VARIANTS (a
// compile-time macro, for the benchmark's grid) adds more.
#ifndef DECODE_VARIANTS  // the list lives in cuda_decode.py (variants()), which defines it
#error "DECODE_VARIANTS is defined by local_engine/attention/cuda_decode.py's build wrapper"
#endif

template <int D, int KIND, typename QT>
void dispatch_cfg(const Params& p, int steps, int warps, int stages, int num_tokens,
                  int num_kv_heads, int min_smem, cudaStream_t stream, int* occupancy) {
#define X(S, W, ST)                                                              \
  if (steps == S && warps == W && stages == ST) {                                \
    if constexpr (KIND == KV_16 || S >= 2) {                                     \
      launch<D, S, W, ST, KIND, QT>(p, num_tokens, num_kv_heads, min_smem, stream,  \
                                    occupancy);                                  \
      return;                                                                    \
    }                                                                            \
  }
  DECODE_VARIANTS
#undef X
  TORCH_CHECK(false, "decode_1b: configuration (steps=", steps, ", warps=", warps,
              ", stages=", stages, ") is not compiled in for this cache kind (1-byte caches need "
              "steps >= 2)");
}

}  // namespace

std::vector<std::vector<int64_t>> variants() {
  std::vector<std::vector<int64_t>> v;
#define X(S, W, ST) v.push_back({S, W, ST});
  DECODE_VARIANTS
#undef X
  return v;
}

// out / seg_*: see Params. Shapes and strides are checked by the Python caller
// (local_engine/attention/cuda_decode.py); this entry checks dtypes and devices only.
void decode_1b_impl(torch::Tensor out, torch::Tensor seg_out, torch::Tensor seg_max,
                    torch::Tensor seg_sum, torch::Tensor q, torch::Tensor k_cache,
                    torch::Tensor v_cache, torch::Tensor k_scale, torch::Tensor v_scale,
                    torch::Tensor block_tables, torch::Tensor cu_seqlens_q,
                    torch::Tensor seq_lens, double qk_scale, int64_t num_segments, int64_t steps,
                    int64_t warps, int64_t stages, int64_t min_smem, int* occ) {
  TORCH_CHECK(q.is_cuda() && k_cache.is_cuda(), "decode_1b: CUDA tensors only");
  TORCH_CHECK(q.scalar_type() == at::kBFloat16 || q.scalar_type() == at::kHalf,
              "decode_1b: queries must be bfloat16 or float16");
  TORCH_CHECK(block_tables.scalar_type() == at::kInt && cu_seqlens_q.scalar_type() == at::kInt &&
                  seq_lens.scalar_type() == at::kInt,
              "decode_1b: block_tables, cu_seqlens_q and seq_lens must be int32");
  const bool fp8 = k_cache.scalar_type() == at::kFloat8_e4m3fn;
  const bool q8 = fp8 || k_cache.scalar_type() == at::kChar;
  TORCH_CHECK(q8 || k_cache.scalar_type() == q.scalar_type(),
              "decode_1b: cache must be int8, fp8 or the queries' dtype");
  const int64_t eb = k_cache.element_size();  // strides below in bytes
  const c10::cuda::CUDAGuard guard(q.device());
  Params p;
  p.out = out.data_ptr();
  const bool split = num_segments > 1;
  p.seg_out = split ? seg_out.data_ptr<float>() : nullptr;
  p.seg_max = split ? seg_max.data_ptr<float>() : nullptr;
  p.seg_sum = split ? seg_sum.data_ptr<float>() : nullptr;
  p.q = q.data_ptr();
  p.k = reinterpret_cast<const uint8_t*>(k_cache.data_ptr());
  p.v = reinterpret_cast<const uint8_t*>(v_cache.data_ptr());
  p.ks = q8 ? k_scale.data_ptr<float>() : nullptr;
  p.vs = q8 ? v_scale.data_ptr<float>() : nullptr;
  p.bt = block_tables.data_ptr<int>();
  p.cu_q = cu_seqlens_q.data_ptr<int>();
  p.seq_lens = seq_lens.data_ptr<int>();
  p.qk_scale = static_cast<float>(qk_scale);
  p.num_seqs = static_cast<int>(seq_lens.size(0));
  p.num_segments = static_cast<int>(num_segments);
  const int num_tokens = static_cast<int>(q.size(0));
  p.num_heads = static_cast<int>(q.size(1));
  const int num_kv_heads = static_cast<int>(k_cache.size(2));
  p.group = p.num_heads / num_kv_heads;
  p.stride_qt = q.stride(0), p.stride_qh = q.stride(1);
  p.stride_ot = out.stride(0), p.stride_oh = out.stride(1);
  p.stride_kb = k_cache.stride(0) * eb, p.stride_kt = k_cache.stride(1) * eb;
  p.stride_kh = k_cache.stride(2) * eb;
  p.stride_vb = v_cache.stride(0) * eb, p.stride_vt = v_cache.stride(1) * eb;
  p.stride_vh = v_cache.stride(2) * eb;
  p.stride_sb = q8 ? k_scale.stride(0) : 0, p.stride_sh = q8 ? k_scale.stride(2) : 0;
  p.stride_bt = block_tables.stride(0);
  p.max_blocks = static_cast<int>(block_tables.size(1));
  const int d = static_cast<int>(q.size(2));
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  const int s = static_cast<int>(steps), w = static_cast<int>(warps), st = static_cast<int>(stages);
  const int ms = static_cast<int>(min_smem);
  const bool half = q.scalar_type() == at::kHalf;
  const int kind = fp8 ? KV_FP8 : q8 ? KV_INT8 : KV_16;
#define DISPATCH(D_, KIND_)                                                              \
  half ? dispatch_cfg<D_, KIND_, __half>(p, s, w, st, num_tokens, num_kv_heads, ms, stream, occ) \
       : dispatch_cfg<D_, KIND_, __nv_bfloat16>(p, s, w, st, num_tokens, num_kv_heads, ms, stream, occ)
#define BY_KIND(D_)                              \
  if (kind == KV_INT8) {                         \
    DISPATCH(D_, KV_INT8);                       \
  } else if (kind == KV_FP8) {                   \
    DISPATCH(D_, KV_FP8);                        \
  } else {                                       \
    DISPATCH(D_, KV_16);                         \
  }
  if (d == 128) {
    BY_KIND(128)
  } else if (d == 64) {
    BY_KIND(64)
  } else {
    TORCH_CHECK(false, "decode_1b: head_dim must be 64 or 128, got ", d);
  }
#undef BY_KIND
#undef DISPATCH
}

void decode_1b(torch::Tensor out, torch::Tensor seg_out, torch::Tensor seg_max,
               torch::Tensor seg_sum, torch::Tensor q, torch::Tensor k_cache,
               torch::Tensor v_cache, torch::Tensor k_scale, torch::Tensor v_scale,
               torch::Tensor block_tables, torch::Tensor cu_seqlens_q, torch::Tensor seq_lens,
               double qk_scale, int64_t num_segments, int64_t steps, int64_t warps,
               int64_t stages, int64_t min_smem) {
  decode_1b_impl(out, seg_out, seg_max, seg_sum, q, k_cache, v_cache, k_scale, v_scale,
                 block_tables, cu_seqlens_q, seq_lens, qk_scale, num_segments, steps, warps,
                 stages, min_smem, nullptr);
}

// CTAs of one SM for this call's launch (no launch): decode_1b's arguments, the count returned
int64_t occupancy(torch::Tensor out, torch::Tensor q, torch::Tensor k_cache, torch::Tensor v_cache,
                  torch::Tensor k_scale, torch::Tensor v_scale, torch::Tensor block_tables,
                  torch::Tensor cu_seqlens_q, torch::Tensor seq_lens, int64_t steps,
                  int64_t warps, int64_t stages, int64_t min_smem) {
  int n = -1;
  decode_1b_impl(out, out, out, out, q, k_cache, v_cache, k_scale, v_scale, block_tables,
                 cu_seqlens_q, seq_lens, 1.0, 1, steps, warps, stages, min_smem, &n);
  return n;
}

// (shared memory per SM, shared memory the driver reserves per CTA), bytes, of CUDA device dev
std::vector<int64_t> smem_limits(int64_t dev) {
  int per_sm = 0, reserved = 0;
  C10_CUDA_CHECK(cudaDeviceGetAttribute(&per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor,
                                        static_cast<int>(dev)));
  C10_CUDA_CHECK(cudaDeviceGetAttribute(&reserved, cudaDevAttrReservedSharedMemoryPerBlock,
                                        static_cast<int>(dev)));
  return {per_sm, reserved};
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("decode_1b", &decode_1b, "paged decode attention over an INT8 / FP8 / 16-bit KV cache");
  m.def("occupancy", &occupancy, "CTAs of one SM for a launch (no launch)");
  m.def("smem_limits", &smem_limits, "(shared memory per SM, reserved per CTA) in bytes");
  m.def("variants", &variants, "compiled (steps, warps, stages) configurations");
}
