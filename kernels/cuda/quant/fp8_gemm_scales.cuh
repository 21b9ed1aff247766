// Internal: one value of a W8A8 linear from its raw float32 sum (fp8_gemm_scales.h), in the
// arithmetic LaunchApplyFp8GemmScales stores, for the kernels that read Fp8PendingScales.
#pragma once

#include "kernels/cuda/common/device_utils.cuh"
#include "kernels/cuda/quant/fp8_gemm_scales.h"

namespace llm::cuda {

// sum x x_scale x w_scale + bias, rounded once to T: one explicit product and one fused
// multiply-add, so that every kernel forming it gives the same bits.
template <typename T>
__device__ __forceinline__ T ScaledFp8Sum(float sum, float x_scale, float w_scale, float bias) {
  return FromFloat<T>(__fmaf_rn(__fmul_rn(sum, x_scale), w_scale, bias));
}

// Token t's scale, and column c's (the bias's and w_scale's reads are no kernel's output).
__device__ __forceinline__ float PendingXScale(const Fp8PendingScales& p, int64_t t) {
  return p.x_scale[p.x_per_token ? t : 0];
}
__device__ __forceinline__ float PendingWScale(const Fp8PendingScales& p, int64_t c) {
  return __ldg(p.w_scale + (p.w_per_row ? c : 0));
}
template <typename T>
__device__ __forceinline__ float PendingBias(const Fp8PendingScales& p, int64_t c) {
  return p.bias != nullptr ? ToFloat(static_cast<const T*>(p.bias)[c]) : 0.0f;
}

}  // namespace llm::cuda
