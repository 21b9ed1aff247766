// Internal: the second half of an RMSNorm over one row, shared by the norm kernel
// (rms_norm.cu) and the fused all-reduce epilogue (comm/one_shot_all_reduce.cu) so that both
// round identically. Each thread passes the sum of squares of the row elements it formed (with
// the same `for (c = threadIdx.x; ...; c += blockDim.x)` walk used here, so that the second pass
// re-reads only what this same thread wrote and no barrier is needed between the passes).
#pragma once

#include "kernels/cuda/common/device_utils.cuh"

namespace llm::cuda {

// out = T(weight * (x * rsqrt(mean(x^2) + eps))) over a row of `dim`; every thread of the block
// calls it (the sum is block-wide). `scratch` holds 32 floats of shared memory.
template <typename T, bool kVec16>
__device__ __forceinline__ void FinishRmsNormRow(const T* x, const T* weight, T* out, int64_t dim, float sum_sq,
                                                 float eps, float* scratch) {
  sum_sq = BlockSum(sum_sq, scratch);
  const float inv = rsqrtf(sum_sq / static_cast<float>(dim) + eps);
  if constexpr (kVec16) {
    constexpr int kVec = Vec16<T>::kVec;
    for (int64_t c = threadIdx.x; c < dim / kVec; c += blockDim.x) {
      const Vec16<T> v = LoadVec(x + c * kVec);
      const Vec16<T> w = LoadVec(weight + c * kVec);
      Vec16<T> r;
#pragma unroll
      for (int e = 0; e < kVec; ++e) r.v[e] = FromFloat<T>(ToFloat(w.v[e]) * (ToFloat(v.v[e]) * inv));
      StoreVec(out + c * kVec, r);
    }
  } else {
    for (int64_t c = threadIdx.x; c < dim; c += blockDim.x)
      out[c] = FromFloat<T>(ToFloat(weight[c]) * (ToFloat(x[c]) * inv));
  }
}

}  // namespace llm::cuda
