// Internal: the RMSNorm of a linear kernel's input rows, formed by each block of the linear into
// shared memory before its products (FusedRmsNorm). Every block repeats it (the rows are a few KB
// read from L2, while the block's weight loads, issued before the dependency wait, are in flight).
#pragma once

#include "kernels/cuda/common/device_utils.cuh"
#include "kernels/cuda/norm/fused_rms_norm.h"
#include "kernels/cuda/norm/rms_norm_row.cuh"

namespace llm::cuda {

// xs[r * xs_stride + c] = RmsNorm(x[r, :])[c] for r < m, K = k columns (k % 8 == 0, 16-byte
// aligned rows and stride, K no more than the held form takes). The sum of squares of each row is formed exactly as
// RmsNormHeldKernel forms it: virtual thread v of its RmsNormHeldThreads sums its chunks
// v, v + threads, ... element by element, each warp of 32 virtual threads is summed by WarpSum,
// and the warps' sums by one more WarpSum (BlockSum); here this block's threads stand in for the
// virtual ones, blockDim.x (a multiple of 32) at a time. Ends with a barrier: xs is ready.
// `scratch` holds 16 floats.
template <typename T>
__device__ __forceinline__ void NormalizeRowsToShared(const T* __restrict__ x, const T* __restrict__ weight, float eps,
                                                      int m, int k, T* xs, int xs_stride, float* scratch) {
  constexpr int kVec = Vec16<T>::kVec;
  const int lane = threadIdx.x & 31, vecs = k / kVec;
  const int vthreads = RmsNormHeldThreads(vecs);
  for (int r = 0; r < m; ++r) {
    const T* row = x + static_cast<int64_t>(r) * k;
    for (int base = 0; base < vthreads; base += blockDim.x) {  // warp-uniform: vthreads % 32 == 0
      const int v = base + static_cast<int>(threadIdx.x);
      if (base + static_cast<int>(threadIdx.x & ~31u) >= vthreads) break;
      float sum_sq = 0.0f;
      for (int c = v; c < vecs; c += vthreads) {
        const Vec16<T> e = LoadVec(row + c * kVec);
#pragma unroll
        for (int i = 0; i < kVec; ++i) {
          const float f = ToFloat(e.v[i]);
          sum_sq += f * f;
        }
      }
      sum_sq = WarpSum(sum_sq);
      if (lane == 0) scratch[v >> 5] = sum_sq;
    }
    __syncthreads();
    const float total = WarpSum(lane < (vthreads >> 5) ? scratch[lane] : 0.0f);
    const float inv = rsqrtf(total / static_cast<float>(k) + eps);
    for (int c = threadIdx.x; c < vecs; c += blockDim.x) {
      const Vec16<T> e = LoadVec(row + c * kVec);
      StoreVec(xs + static_cast<int64_t>(r) * xs_stride + c * kVec,
               RmsNormScale(e, LoadVec(weight + c * kVec), inv));
    }
    __syncthreads();  // xs complete; scratch free for the next row
  }
}

}  // namespace llm::cuda
