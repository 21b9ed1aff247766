// The input columns of an act-order int4 linear in storage order (engine/core/storage_format.h):
// out[r, j] = x[r, perm[j]], 0 where perm[j] < 0 (padding). GPTQ desc_act and compressed-tensors
// actorder "group" sort a weight's columns by group so that each 32-column chunk has one scale;
// the W4A16 kernels then read x in that order.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/core/dtype.h"
#include "kernels/cuda/common/stream.h"

namespace llm::cuda {

// x [m, k] and out [m, kp] of `dtype` (bf16 or fp16), perm i32 [kp].
absl::Status LaunchW4A16PermuteColumns(DType dtype, const void* x, const int32_t* perm, void* out, int64_t m,
                                       int64_t k, int64_t kp, Stream stream, bool pdl);

}  // namespace llm::cuda
