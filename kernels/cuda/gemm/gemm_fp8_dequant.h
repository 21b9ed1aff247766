// An FP8-weight GEMM for any row count and any scale grid: out[M, N] = x[M, K] · dequant(W)ᵀ
// (+ bias) on the tensor cores (mma.sync m16n8k16, 16-bit operands, fp32 accumulation), W's E4M3
// elements widened to x's 16-bit type exactly (every E4M3 value is a bf16 and a half) and its
// scales applied to each 32-column step's partial sums. x is not quantized (W8A16).
//
// It is the path for what cuBLASLt's FP8 GEMM does not take: scales per row and 128-column group
// (kGroup: fused parts or TP slices cutting 128 x 128 blocks), scale-mode combinations its
// heuristic refuses, unaligned operands. Tiles of 64 x 64 outputs, no software pipelining:
// correct first; cuBLASLt is the fast path.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/core/dtype.h"
#include "kernels/cuda/common/stream.h"
#include "kernels/cuda/gemm/gemv_fp8.h"

namespace llm::cuda {

// x, bias of `dtype` (bf16/fp16), out of `out_dtype` (== dtype or f32), w E4M3 [N, K]; K % 8 == 0.
absl::Status LaunchGemmFp8Dequant(DType dtype, DType out_dtype, const void* x, const void* w,
                                  const Fp8WeightScales& scales, const void* bias, void* out, int64_t m, int64_t n,
                                  int64_t k, Stream stream);

}  // namespace llm::cuda
