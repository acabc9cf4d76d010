// The CPU kernels' entry points shared between the translation units (linear.cpp,
// decode.cpp); see those files for layouts and arithmetic.
#pragma once

#include <ATen/ATen.h>

#include <string>

namespace promptcache {

std::string isa();
at::Tensor linear_f32(const at::Tensor& x, const at::Tensor& packed, int64_t N);
at::Tensor linear_bf16(const at::Tensor& x, const at::Tensor& packed, int64_t N);
at::Tensor linear_int8(const at::Tensor& x, const at::Tensor& packed, const at::Tensor& wsum,
                       const at::Tensor& scale, int64_t N);

}  // namespace promptcache
