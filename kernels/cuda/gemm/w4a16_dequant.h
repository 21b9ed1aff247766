// Int4 weights (W4A16) widened to the activation type, a slice of rows at a time, for batches
// where a 16-bit tensor-core GEMM (cuBLASLt) on the widened slice beats streaming the codes
// through a 4-bit kernel: out[r, j] = (code - zero) * scale of rows [row0, row0 + rows), storage
// column j, rounded once to `dtype` (the one rounding this path adds: the product of a 5-bit
// integer and a 16-bit scale has more bits than bf16 keeps). A slice at a time: the caller's
// workspace holds one.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/core/dtype.h"
#include "kernels/cuda/common/stream.h"
#include "kernels/cuda/gemm/w4a16_weights.h"

namespace llm::cuda {

// out: [rows, kp] of `dtype` (bf16 or fp16), 16-byte aligned; rows [row0, row0 + rows) of the
// n-row weight, kp a multiple of 32.
absl::Status LaunchW4A16Dequantize(DType dtype, const W4A16Weights& w, int64_t n, int64_t row0, int64_t rows,
                                   int64_t kp, void* out, Stream stream);

}  // namespace llm::cuda
