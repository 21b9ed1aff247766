#include "kernels/cuda/gemm/gemv.h"

#include "kernels/cuda/common/cuda_status.h"
#include "kernels/cuda/common/device_utils.cuh"

namespace llm::cuda {
namespace {

constexpr int kWarps = 8;   // rows per block
constexpr int kUnroll = 4;  // 16-byte weight loads in flight per lane (x2 with the prefetch)

// One warp per output row n; lanes stride over K in 16-byte vectors. The weight loads of the next
// kUnroll vectors are issued before the current ones are consumed (software pipelining).
template <typename T, typename TOut, int M>
__global__ void __launch_bounds__(kWarps * 32) GemvKernel(const T* __restrict__ x, const T* __restrict__ w,
                                                          const T* __restrict__ bias, TOut* __restrict__ out,
                                                          int m_rows, int n, int k) {
  constexpr int kVec = Vec16<T>::kVec;
  constexpr int kStep = 32 * kUnroll;  // vectors per warp iteration
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int row = blockIdx.x * kWarps + warp;
  const bool active = row < n;
  const int kv = k / kVec;
  const T* wr = w + static_cast<int64_t>(active ? row : 0) * k;

  Vec16<T> cur[kUnroll];
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    const int idx = lane + u * 32;
    if (active && idx < kv) cur[u] = LoadVecStreaming(wr + idx * kVec);
  }
  // Weights never depend on the previous kernel; x does.
  GridDependencyWait();
  AllowDependentLaunch();

  float acc[M];
#pragma unroll
  for (int m = 0; m < M; ++m) acc[m] = 0.0f;
  for (int base = 0; base < kv; base += kStep) {
    Vec16<T> nxt[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int idx = base + kStep + lane + u * 32;
      if (active && idx < kv) nxt[u] = LoadVecStreaming(wr + idx * kVec);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int idx = base + lane + u * 32;
      if (idx < kv) {
        float wf[kVec];
#pragma unroll
        for (int e = 0; e < kVec; ++e) wf[e] = ToFloat(cur[u].v[e]);
#pragma unroll
        for (int m = 0; m < M; ++m) {
          if (m < m_rows) {
            Vec16<T> xv;
            *reinterpret_cast<uint4*>(&xv) = __ldg(reinterpret_cast<const uint4*>(x + static_cast<int64_t>(m) * k + idx * kVec));
            float s = 0.0f;
#pragma unroll
            for (int e = 0; e < kVec; ++e) s += wf[e] * ToFloat(xv.v[e]);
            acc[m] += s;
          }
        }
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) cur[u] = nxt[u];
  }
  if (!active) return;
  const float b = bias ? ToFloat(bias[row]) : 0.0f;
#pragma unroll
  for (int m = 0; m < M; ++m) {
    if (m < m_rows) {
      const float s = WarpSum(acc[m]);
      if (lane == 0) out[static_cast<int64_t>(m) * n + row] = FromFloat<TOut>(s + b);
    }
  }
}

// Any K / alignment: scalar loads.
template <typename T, typename TOut>
__global__ void __launch_bounds__(kWarps * 32) GemvScalarKernel(const T* __restrict__ x, const T* __restrict__ w,
                                                                const T* __restrict__ bias, TOut* __restrict__ out,
                                                                int m_rows, int n, int k) {
  GridDependencyWait();
  AllowDependentLaunch();
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int row = blockIdx.x * kWarps + warp;
  if (row >= n) return;
  const T* wr = w + static_cast<int64_t>(row) * k;
  float acc[kGemvMaxRows];
#pragma unroll
  for (int m = 0; m < kGemvMaxRows; ++m) acc[m] = 0.0f;
  for (int i = lane; i < k; i += 32) {
    const float wf = ToFloat(wr[i]);
#pragma unroll
    for (int m = 0; m < kGemvMaxRows; ++m)
      if (m < m_rows) acc[m] += wf * ToFloat(x[static_cast<int64_t>(m) * k + i]);
  }
  const float b = bias ? ToFloat(bias[row]) : 0.0f;
#pragma unroll
  for (int m = 0; m < kGemvMaxRows; ++m) {
    if (m < m_rows) {
      const float s = WarpSum(acc[m]);
      if (lane == 0) out[static_cast<int64_t>(m) * n + row] = FromFloat<TOut>(s + b);
    }
  }
}

template <typename T, typename TOut>
absl::Status LaunchTyped(const void* x, const void* w, const void* bias, void* out, int m, int n, int k, bool pdl,
                         Stream stream) {
  constexpr int kVec = Vec16<T>::kVec;
  const dim3 grid((n + kWarps - 1) / kWarps), block(kWarps * 32);
  const T* xt = static_cast<const T*>(x);
  const T* wt = static_cast<const T*>(w);
  const T* bt = static_cast<const T*>(bias);
  TOut* ot = static_cast<TOut*>(out);
  cudaError_t err;
  if (k % kVec != 0 || !Aligned16(x) || !Aligned16(w)) {
    err = LaunchKernel(GemvScalarKernel<T, TOut>, grid, block, 0, stream, pdl, xt, wt, bt, ot, m, n, k);
  } else if (m == 1) {
    err = LaunchKernel(GemvKernel<T, TOut, 1>, grid, block, 0, stream, pdl, xt, wt, bt, ot, m, n, k);
  } else if (m == 2) {
    err = LaunchKernel(GemvKernel<T, TOut, 2>, grid, block, 0, stream, pdl, xt, wt, bt, ot, m, n, k);
  } else if (m <= 4) {
    err = LaunchKernel(GemvKernel<T, TOut, 4>, grid, block, 0, stream, pdl, xt, wt, bt, ot, m, n, k);
  } else {
    err = LaunchKernel(GemvKernel<T, TOut, 8>, grid, block, 0, stream, pdl, xt, wt, bt, ot, m, n, k);
  }
  CUDA_RETURN_IF_ERROR(err);
  return absl::OkStatus();
}

}  // namespace

absl::Status LaunchGemv(DType dtype, DType out_dtype, const void* x, const void* w, const void* bias, void* out,
                        int64_t m, int64_t n, int64_t k, bool pdl, Stream stream) {
  if (m < 0 || m > kGemvMaxRows || n <= 0 || k <= 0 || n > 0x7fffffff || k > 0x7fffffff ||
      int64_t{k} * n > (int64_t{1} << 40))
    return absl::InvalidArgumentError(absl::StrCat("Gemv: unsupported shape m ", m, " n ", n, " k ", k));
  if (m == 0) return absl::OkStatus();
  const int mi = static_cast<int>(m), ni = static_cast<int>(n), ki = static_cast<int>(k);
  if (out_dtype == dtype) {
    return LLM_DISPATCH_FLOAT(dtype, "Gemv",
                              [&] { return LaunchTyped<scalar_t, scalar_t>(x, w, bias, out, mi, ni, ki, pdl, stream); });
  }
  if (out_dtype == DType::kF32) {
    return LLM_DISPATCH_FLOAT(dtype, "Gemv",
                              [&] { return LaunchTyped<scalar_t, float>(x, w, bias, out, mi, ni, ki, pdl, stream); });
  }
  return absl::InvalidArgumentError("Gemv: output dtype must be the input dtype or float32");
}

}  // namespace llm::cuda
