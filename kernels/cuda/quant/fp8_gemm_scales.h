// The second half of a W8A8 GEMM whose raw sums come from cuBLASLt's per-tensor (scalar) scale
// form: out[t, n] = sums[t, n] x x's scale (per token or one) x W's scale (per row or one) (+ bias),
// in bf16/fp16. cuBLASLt's per-token x per-channel form offers a single algorithm, whose tiles leave
// most SMs idle on narrow weights at 64-256 rows; its scalar form has split-K algorithms
// (benchmarks/RESULTS.md, twenty-fourth session).
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/core/dtype.h"
#include "kernels/core/host_device.h"
#include "kernels/cuda/common/stream.h"

namespace llm::cuda {

// Such raw sums with their scales still to apply, handed to the kernel that reads the linear's
// output (QkvRope, the residual add and RMSNorm) instead of a pass of their own: that kernel forms
// each value exactly as LaunchApplyFp8GemmScales would store it (fp8_gemm_scales.cuh).
struct Fp8PendingScales {
  const float* sums = nullptr;  // f32 [m, n]
  const float* x_scale = nullptr;
  bool x_per_token = false;
  const float* w_scale = nullptr;
  bool w_per_row = false;
  const void* bias = nullptr;  // [n] of the output dtype, or null
  LLM_HOST_DEVICE bool active() const { return sums != nullptr; }
};

// sums f32 [m, n]; x_scale [m] (x_per_token) or [1]; w_scale [n] (w_per_row) or [1]; bias [n] of
// out_dtype or null; out [m, n] of out_dtype (bf16 or fp16), n a multiple of 4.
absl::Status LaunchApplyFp8GemmScales(DType out_dtype, const float* sums, int64_t m, int64_t n,
                                      const float* x_scale, bool x_per_token, const float* w_scale,
                                      bool w_per_row, const void* bias, void* out, Stream stream, bool pdl);

}  // namespace llm::cuda
