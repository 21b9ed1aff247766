// The end the register GEMVs share (gemv.cu's bf16 GemvKernel, gemv_fp8.cu's register form):
// each warp's M dot products of its row segment, summed over the warp (times `scale`); with one
// warp a row, lane 0 writes the outputs; otherwise the block adds each row's `wpr` segment sums
// in a fixed order (deterministic). Called last by the kernel. `add_to_out`: out holds a residual,
// and receives T(out + T(sum)) (GemvOptions::add_to_out).
#pragma once

#include "kernels/cuda/common/device_utils.cuh"

namespace llm::cuda {

template <int M, int kWarps, typename T, typename TOut>
__device__ __forceinline__ void FinishRegisterGemv(float (&acc)[M], float scale, bool active, int warp, int lane,
                                                   int wpr, int row, int rows_per_block, int m_rows, int n,
                                                   const T* __restrict__ bias, TOut* __restrict__ out,
                                                   float (&partial)[kWarps][M], bool add_to_out = false) {
  auto store = [&](int64_t at, float s) {
    const TOut rounded = FromFloat<TOut>(s);
    out[at] = add_to_out ? FromFloat<TOut>(ToFloat(out[at]) + ToFloat(rounded)) : rounded;
  };
#pragma unroll
  for (int m = 0; m < M; ++m) acc[m] = WarpSum(acc[m]) * scale;
  if (wpr == 1) {
    if (!active || lane != 0) return;
    const float b = bias ? ToFloat(bias[row]) : 0.0f;
#pragma unroll
    for (int m = 0; m < M; ++m)
      if (m < m_rows) store(static_cast<int64_t>(m) * n + row, acc[m] + b);
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
      store(static_cast<int64_t>(m) * n + out_row, s);
    }
  }
}

// The gate/up form (GemvOptions::glu_cols = F > 0, one warp a row): warps 0-3 of block b sum gate
// rows 4b..4b+3 and warps 4-7 the up rows F + 4b.., each output rounded to T as the 16-bit gate/up
// tensor would hold it; the block then writes out[m, 4b + j] = silu(gate) * up rounded to T, the
// values SiluMul computes from that tensor (bit for bit).
__device__ __forceinline__ int GluGemvRow(int block, int warp, int f) { return (warp < 4 ? 0 : f) + block * 4 + (warp & 3); }

// The paired ends' first half (the gate/up form above, the QKV-RoPE end in qkv_rope_epilogue.cuh;
// one warp a row, warps j and 4 + j holding a pair's rows): each warp's M sums over the warp (times
// `scale`) plus its row's bias, rounded to T as the 16-bit output would hold them, into
// partial[warp], for the whole block to combine after the barrier.
template <int M, int kWarps, typename T>
__device__ __forceinline__ void PairedRowSums(float (&acc)[M], float scale, int warp, int lane, int row,
                                              const T* __restrict__ bias, float (&partial)[kWarps][M]) {
  static_assert(kWarps == 8, "four row pairs a block");
#pragma unroll
  for (int m = 0; m < M; ++m) acc[m] = WarpSum(acc[m]) * scale;
  if (lane == 0) {
    const float b = bias ? ToFloat(bias[row]) : 0.0f;
#pragma unroll
    for (int m = 0; m < M; ++m) partial[warp][m] = ToFloat(FromFloat<T>(acc[m] + b));
  }
  __syncthreads();
}

template <int M, int kWarps, typename T>
__device__ __forceinline__ void FinishRegisterGemvGlu(float (&acc)[M], float scale, int warp, int lane,
                                                      int row, int m_rows, int f, const T* __restrict__ bias,
                                                      T* __restrict__ out, float (&partial)[kWarps][M]) {
  PairedRowSums<M, kWarps, T>(acc, scale, warp, lane, row, bias, partial);
  const int i = threadIdx.x;
  if (i < 4 * M) {
    const int j = i / M, m = i % M, col = blockIdx.x * 4 + j;
    if (m < m_rows && col < f)
      out[static_cast<int64_t>(m) * f + col] = FromFloat<T>(SiluFor<T>(partial[j][m]) * partial[4 + j][m]);
  }
}

}  // namespace llm::cuda
