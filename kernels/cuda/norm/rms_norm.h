// RMSNorm over rows, optionally fused with the residual add that precedes it.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/core/dtype.h"
#include "kernels/cuda/common/stream.h"
#include "kernels/cuda/quant/fp8_gemm_scales.h"
#include "kernels/cuda/quant/fp8_quantize.h"

namespace llm::cuda {

// For each of `rows` rows of length `dim`:
//   residual != null: residual += delta (when delta != null); src = residual (as stored)
//   residual == null: src = x
//   out = weight * (src / sqrt(mean(src^2) + eps)), in float32, rounded once.
// All tensors of `dtype` (weight too).
// `pdl`: launched with programmatic dependent launch (the kernel waits for its predecessor before
// touching x, residual, delta and out; only its launch and its loads of `weight`, which no kernel
// writes, overlap the predecessor's tail).
// `quantized`: out is also written quantized to FP8 per row (or by a static scale) for the W8A8
// linear that reads it (fp8_quantize.h); with quantized->values_unused, out itself may be left
// unwritten.
// `pending_delta`: the delta is a W8A8 linear's raw sums with scales still to apply ([rows, dim];
// `delta` unused), each value formed as LaunchApplyFp8GemmScales would store it; a residual and
// the held form (rows of at most RmsNormHeldChunks' 8 chunks a thread, aligned) only.
absl::Status LaunchRmsNorm(DType dtype, const void* x, void* residual, const void* delta, const void* weight,
                           void* out, int64_t rows, int64_t dim, float eps, Stream stream, bool pdl = false,
                           const Fp8RowOutput* quantized = nullptr,
                           const Fp8PendingScales* pending_delta = nullptr);

// Whether LaunchRmsNorm takes `p` as a pending delta (the row's shape and alignment aside).
bool RmsNormTakesPendingDelta(const Fp8PendingScales& p);

}  // namespace llm::cuda
