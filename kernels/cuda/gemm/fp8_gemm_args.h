// The arguments of an FP8 GEMM (W8A8: x and W both E4M3, each with its float32 scales), shared by
// cuBLASLt's FP8 GEMM (cublaslt_gemm.h) and the warpgroup GEMM (gemm_fp8_wgmma.h).
#pragma once

#include <cstdint>

#include "kernels/core/dtype.h"

namespace llm::cuda {

// How the FP8 GEMM's float32 scales apply (cuBLASLt's matrix scale modes; Hopper supports all of
// them since CUDA 12.9).
enum class Fp8ScaleMode {
  kScalar,       // one value (device pointer)
  kOuterVector,  // weights: [N] (per channel); activations: [M] (per token)
  kBlock128,     // weights only: [ceil(N/128), ceil(K/128)] row-major (128 x 128 blocks)
  kVector128,    // activations only: [ceil(K/128), M], one per row and 128 columns, group-major
};

// The two modes a single scale or one scale a row/token covers (the warpgroup GEMM's, the W8A8
// GEMV's and the raw-sums form's): no scale changes along K.
constexpr bool ScaleModeIsTensorOrRow(Fp8ScaleMode m) {
  return m == Fp8ScaleMode::kScalar || m == Fp8ScaleMode::kOuterVector;
}

// out[M, N] = (x[M, K] · W[N, K]ᵀ) with E4M3 operands, each dequantized by its scales, (+ bias),
// fp32 accumulation, out in bf16/fp16 (cuBLASLt also float32, with both scales scalar and no bias).
struct Fp8GemmArgs {
  const void* x = nullptr;  // E4M3 [M, K]
  const void* w = nullptr;  // E4M3 [N, K]
  const float* x_scale = nullptr;
  const float* w_scale = nullptr;
  Fp8ScaleMode x_mode = Fp8ScaleMode::kScalar;
  Fp8ScaleMode w_mode = Fp8ScaleMode::kScalar;
  const void* bias = nullptr;  // [N] of out_dtype, or null
  void* out = nullptr;
  DType out_dtype = DType::kBF16;
  int64_t m = 0, n = 0, k = 0;
  // cuBLASLt: with per-tensor or per-channel x per-token scales, sum the E4M3 products in the
  // tensor cores' accumulator over the whole K (its FAST_ACCUM) instead of promoting the partial
  // sums to float32 registers every few K steps. Ignored for the 128-column block and group scales
  // (their scales change along K, so those forms always promote) and by the warpgroup GEMM
  // (which always promotes).
  bool fast_accumulation = false;
};

}  // namespace llm::cuda
