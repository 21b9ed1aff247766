// Internal: the second half of an RMSNorm over one row, shared by the norm kernel
// (rms_norm.cu) and the fused all-reduce epilogue (comm/one_shot_all_reduce.cu) so that both
// round identically. Each thread passes the sum of squares of the row elements it formed (with
// the same `for (c = threadIdx.x; ...; c += blockDim.x)` walk used here, so that the second pass
// re-reads only what this same thread wrote and no barrier is needed between the passes).
#pragma once

#include "kernels/cuda/common/device_utils.cuh"

namespace llm::cuda {

// A normalized 16-byte chunk: T(weight * (x * inv)), the rounding every RMSNorm form shares (the
// norm kernels, the fused all-reduce epilogues, the GEMVs that form their input's norm), so that
// each gives the norm kernel's bits.
template <typename T>
__device__ __forceinline__ Vec16<T> RmsNormScale(Vec16<T> x, const Vec16<T>& weight, float inv) {
#pragma unroll
  for (int e = 0; e < Vec16<T>::kVec; ++e)
    x.v[e] = FromFloat<T>(ToFloat(weight.v[e]) * (ToFloat(x.v[e]) * inv));
  return x;
}

// The first half of an add + RMSNorm over one row, for the norm kernel and the fused all-reduce
// epilogues alike: res = T(res + delta), where `delta_at(c)` gives the delta of 16-byte chunk c
// (a Vec16<T>) when kVec16, else of element c (a T) — read from memory, or reduced across ranks.
// Returns this thread's sum of squares of the stored row, over the walk FinishRmsNormRow repeats.
template <typename T, bool kVec16, typename DeltaAt>
__device__ __forceinline__ float AddToRowSumSquares(T* res, int64_t dim, DeltaAt delta_at) {
  float sum_sq = 0.0f;
  if constexpr (kVec16) {
    constexpr int kVec = Vec16<T>::kVec;
    for (int64_t c = threadIdx.x; c < dim / kVec; c += blockDim.x) {
      const Vec16<T> d = delta_at(c);
      Vec16<T> x = LoadVec(res + c * kVec);
#pragma unroll
      for (int e = 0; e < kVec; ++e) {
        x.v[e] = FromFloat<T>(ToFloat(x.v[e]) + ToFloat(d.v[e]));
        const float f = ToFloat(x.v[e]);
        sum_sq += f * f;
      }
      StoreVec(res + c * kVec, x);
    }
  } else {
    for (int64_t c = threadIdx.x; c < dim; c += blockDim.x) {
      const T x = FromFloat<T>(ToFloat(res[c]) + ToFloat(delta_at(c)));
      res[c] = x;
      const float f = ToFloat(x);
      sum_sq += f * f;
    }
  }
  return sum_sq;
}

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
      StoreVec(out + c * kVec, RmsNormScale(v, LoadVec(weight + c * kVec), inv));
    }
  } else {
    for (int64_t c = threadIdx.x; c < dim; c += blockDim.x)
      out[c] = FromFloat<T>(ToFloat(weight[c]) * (ToFloat(x[c]) * inv));
  }
}

}  // namespace llm::cuda
