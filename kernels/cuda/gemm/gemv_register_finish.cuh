// The end the register GEMVs share (gemv.cu's bf16 GemvKernel, gemv_fp8.cu's register form):
// each warp's M dot products of its row segment, summed over the warp (times `scale`); with one
// warp a row, lane 0 writes the outputs; otherwise the block adds each row's `wpr` segment sums
// in a fixed order (deterministic). Called last by the kernel.
#pragma once

#include "kernels/cuda/common/device_utils.cuh"

namespace llm::cuda {

template <int M, int kWarps, typename T, typename TOut>
__device__ __forceinline__ void FinishRegisterGemv(float (&acc)[M], float scale, bool active, int warp, int lane,
                                                   int wpr, int row, int rows_per_block, int m_rows, int n,
                                                   const T* __restrict__ bias, TOut* __restrict__ out,
                                                   float (&partial)[kWarps][M]) {
#pragma unroll
  for (int m = 0; m < M; ++m) acc[m] = WarpSum(acc[m]) * scale;
  if (wpr == 1) {
    if (!active || lane != 0) return;
    const float b = bias ? ToFloat(bias[row]) : 0.0f;
#pragma unroll
    for (int m = 0; m < M; ++m)
      if (m < m_rows) out[static_cast<int64_t>(m) * n + row] = FromFloat<TOut>(acc[m] + b);
    return;
  }
  if (lane == 0) {
#pragma unroll
    for (int m = 0; m < M; ++m) partial[warp][m] = acc[m];
  }
  __syncthreads();
  // Thread i < rows_per_block * M finishes (row i / M, input row i % M) over its wpr warps.
  const int i = threadIdx.x;
  if (i < rows_per_block * M) {
    const int r = i / M, m = i % M;
    const int out_row = blockIdx.x * rows_per_block + r;
    if (m < m_rows && out_row < n) {
      float s = 0.0f;
      for (int q = 0; q < wpr; ++q) s += partial[r * wpr + q][m];
      if (bias) s += ToFloat(bias[out_row]);
      out[static_cast<int64_t>(m) * n + out_row] = FromFloat<TOut>(s);
    }
  }
}

}  // namespace llm::cuda
