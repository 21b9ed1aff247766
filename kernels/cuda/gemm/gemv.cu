#include "kernels/cuda/gemm/gemv.h"

#include <type_traits>

#include "kernels/cuda/common/cuda_status.h"
#include "kernels/cuda/common/device_utils.cuh"
#include "kernels/cuda/common/dynamic_smem.h"
#include "kernels/cuda/gemm/gemv_register_finish.cuh"
#include "kernels/cuda/gemm/gemv_smem_ring.cuh"

#include <algorithm>

namespace llm::cuda {
namespace {

constexpr int kWarps = 8;   // warps per block
constexpr int kUnroll = 4;  // 16-byte weight loads in flight per lane (x2 with the prefetch)

// Block = kWarps warps = kWarps / wpr output rows; the wpr warps of a row each stream a contiguous
// slice of its K vectors (lanes strided by 16 bytes, so a warp reads 512 contiguous bytes per
// load), and reuse each weight vector for all M input rows. The next kUnroll loads are issued
// before the current ones are consumed (software pipelining); the first ones before waiting on
// the previous kernel (weights never depend on it).
template <typename T, typename TOut, int M>
__global__ void __launch_bounds__(kWarps * 32) GemvKernel(const T* __restrict__ x, const T* __restrict__ w,
                                                          const T* __restrict__ bias, TOut* __restrict__ out,
                                                          int m_rows, int n, int k, int wpr, int glu_f) {
  constexpr int kVec = Vec16<T>::kVec;
  constexpr int kStep = 32 * kUnroll;  // vectors per warp iteration
  __shared__ float partial[kWarps][M];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int rows_per_block = kWarps / wpr;
  // glu_f > 0: the gate/up form (one warp a row; gemv_register_finish.cuh).
  const int row = glu_f > 0 ? GluGemvRow(blockIdx.x, warp, glu_f) : blockIdx.x * rows_per_block + warp / wpr;
  const int part = warp % wpr;
  const bool active = row < n;
  const int kv = k / kVec;
  const int len = (kv + wpr - 1) / wpr;
  const int begin = min(kv, part * len), end = min(kv, begin + len);
  const T* wr = w + static_cast<int64_t>(active ? row : 0) * k;

  Vec16<T> cur[kUnroll];
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    const int idx = begin + lane + u * 32;
    if (active && idx < end) cur[u] = LoadVecStreaming(wr + idx * kVec);
  }
  GridDependencyWait();

  float acc[M];
#pragma unroll
  for (int m = 0; m < M; ++m) acc[m] = 0.0f;
  for (int base = begin; base < end; base += kStep) {
    Vec16<T> nxt[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int idx = base + kStep + lane + u * 32;
      if (active && idx < end) nxt[u] = LoadVecStreaming(wr + idx * kVec);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int idx = base + lane + u * 32;
      if (idx < end) {
        float wf[kVec];
#pragma unroll
        for (int e = 0; e < kVec; ++e) wf[e] = ToFloat(cur[u].v[e]);
#pragma unroll
        for (int m = 0; m < M; ++m) {
          if (m < m_rows) {
            Vec16<T> xv;
            *reinterpret_cast<uint4*>(&xv) =
                __ldg(reinterpret_cast<const uint4*>(x + static_cast<int64_t>(m) * k + idx * kVec));
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
  // Only now may the next kernel's blocks launch (and wait, holding SM slots): triggered at the
  // top they would sit resident through this kernel's whole weight stream and cut the number of
  // its blocks (and loads) in flight.
  AllowDependentLaunch();
  if constexpr (std::is_same_v<T, TOut>) {
    if (glu_f > 0) {
      FinishRegisterGemvGlu(acc, 1.0f, warp, lane, row, m_rows, glu_f, bias, out, partial);
      return;
    }
  }
  FinishRegisterGemv(acc, 1.0f, active, warp, lane, wpr, row, rows_per_block, m_rows, n, bias, out, partial);
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

// The ring kernel's M (rows of x) instantiation for m rows.
template <typename T, typename TOut, int M>
cudaError_t LaunchRing(const T* x, const T* w, const T* bias, TOut* out, int m, int n, int k,
                       const GemvRingPlan& plan, bool pdl, cudaStream_t stream) {
  const cudaError_t err = AllowDynamicSmem(GemvRingKernel<T, TOut, M>, plan.smem_bytes);
  if (err != cudaSuccess) return err;
  return LaunchKernel(GemvRingKernel<T, TOut, M>, dim3(plan.blocks), dim3(kRingWarps * 32), plan.smem_bytes,
                      stream, pdl, x, w, bias, out, m, n, k, plan);
}

// Enough blocks to balance the SMs, while each warp keeps >= 64 vectors.
int AutoWarpsPerRow(int64_t n, int64_t k, int vec, int num_sms) {
  int wpr = 1;
  while (wpr < kWarps && n * wpr / kWarps < 12 * int64_t{num_sms} && k / vec / (2 * wpr) >= 64) wpr *= 2;
  return wpr;
}

template <typename T, typename TOut>
absl::Status LaunchTyped(const void* x, const void* w, const void* bias, void* out, int m, int n, int k,
                         const GemvOptions& o, Stream stream) {
  constexpr int kVec = Vec16<T>::kVec;
  const T* xt = static_cast<const T*>(x);
  const T* wt = static_cast<const T*>(w);
  const T* bt = static_cast<const T*>(bias);
  TOut* ot = static_cast<TOut*>(out);
  const dim3 block(kWarps * 32);
  cudaError_t err;
  const int glu_f = static_cast<int>(o.glu_cols);
  const bool vector_rows = k % kVec == 0 && Aligned16(x) && Aligned16(w);
  if (glu_f > 0 && !vector_rows) return absl::InvalidArgumentError("Gemv: the gate/up form needs 16-byte aligned rows");
  if (!vector_rows) {
    err = LaunchKernel(GemvScalarKernel<T, TOut>, dim3((n + kWarps - 1) / kWarps), block, 0, stream, o.pdl, xt, wt, bt,
                       ot, m, n, k);
    CUDA_RETURN_IF_ERROR(err);
    return absl::OkStatus();
  }
  if (o.smem_ring && glu_f == 0) {
    const int m_template = RingRowsTemplate(m);
    GemvRingPlan plan;
    if (PlanGemvRing(n, k, sizeof(T), m_template, o.num_sms, o.ring_bytes, &plan)) {
      if (m_template == 1) {
        err = LaunchRing<T, TOut, 1>(xt, wt, bt, ot, m, n, k, plan, o.pdl, stream);
      } else if (m_template == 2) {
        err = LaunchRing<T, TOut, 2>(xt, wt, bt, ot, m, n, k, plan, o.pdl, stream);
      } else if (m_template == 4) {
        err = LaunchRing<T, TOut, 4>(xt, wt, bt, ot, m, n, k, plan, o.pdl, stream);
      } else {
        err = LaunchRing<T, TOut, 8>(xt, wt, bt, ot, m, n, k, plan, o.pdl, stream);
      }
      CUDA_RETURN_IF_ERROR(err);
      return absl::OkStatus();
    }
  }
  const int wpr = glu_f > 0 ? 1 : o.warps_per_row > 0 ? o.warps_per_row : AutoWarpsPerRow(n, k, kVec, o.num_sms);
  if (wpr != 1 && wpr != 2 && wpr != 4 && wpr != 8) return absl::InvalidArgumentError("Gemv: warps_per_row");
  const dim3 grid(glu_f > 0 ? glu_f / 4 : (n + kWarps / wpr - 1) / (kWarps / wpr));
  if (m == 1) {
    err = LaunchKernel(GemvKernel<T, TOut, 1>, grid, block, 0, stream, o.pdl, xt, wt, bt, ot, m, n, k, wpr, glu_f);
  } else if (m == 2) {
    err = LaunchKernel(GemvKernel<T, TOut, 2>, grid, block, 0, stream, o.pdl, xt, wt, bt, ot, m, n, k, wpr, glu_f);
  } else if (m <= 4) {
    err = LaunchKernel(GemvKernel<T, TOut, 4>, grid, block, 0, stream, o.pdl, xt, wt, bt, ot, m, n, k, wpr, glu_f);
  } else {
    err = LaunchKernel(GemvKernel<T, TOut, 8>, grid, block, 0, stream, o.pdl, xt, wt, bt, ot, m, n, k, wpr, glu_f);
  }
  CUDA_RETURN_IF_ERROR(err);
  return absl::OkStatus();
}

}  // namespace

bool GemvRingFits(DType dtype, int64_t m, int64_t n, int64_t k, size_t ring_bytes, int num_sms) {
  GemvRingPlan plan;
  return m >= 1 && m <= kGemvMaxRows && n <= 0x7fffffff && k <= 0x7fffffff &&
         PlanGemvRing(n, k, static_cast<int>(DTypeSize(dtype)), RingRowsTemplate(m), num_sms, ring_bytes, &plan);
}

int GemvAutoWarpsPerRow(DType dtype, int64_t n, int64_t k, int num_sms) {
  return AutoWarpsPerRow(n, k, static_cast<int>(16 / DTypeSize(dtype)), num_sms);
}

absl::Status LaunchGemv(DType dtype, DType out_dtype, const void* x, const void* w, const void* bias, void* out,
                        int64_t m, int64_t n, int64_t k, const GemvOptions& options, Stream stream) {
  if (m < 0 || m > kGemvMaxRows || n <= 0 || k <= 0 || n > 0x7fffffff || k > 0x7fffffff ||
      int64_t{k} * n > (int64_t{1} << 40))
    return absl::InvalidArgumentError(absl::StrCat("Gemv: unsupported shape m ", m, " n ", n, " k ", k));
  if (options.glu_cols != 0 && (!GemvGluTakes(options.glu_cols, n, k) || out_dtype != dtype))
    return absl::InvalidArgumentError(absl::StrCat("Gemv: the gate/up form takes N = 2F with F a multiple of 4 and an "
                                                   "output in the input dtype (N ", n, ", F ", options.glu_cols, ")"));
  if (options.norm.active() || options.add_to_out || options.rope != nullptr)
    return absl::InvalidArgumentError("Gemv: the 16-bit GEMV fuses no norm, residual add or RoPE (the FP8 and int4 "
                                      "register GEMVs do)");
  if (m == 0) return absl::OkStatus();
  const int mi = static_cast<int>(m), ni = static_cast<int>(n), ki = static_cast<int>(k);
  if (out_dtype == dtype) {
    return LLM_DISPATCH_FLOAT(dtype, "Gemv",
                              [&] { return LaunchTyped<scalar_t, scalar_t>(x, w, bias, out, mi, ni, ki, options, stream); });
  }
  if (out_dtype == DType::kF32) {
    return LLM_DISPATCH_FLOAT(dtype, "Gemv",
                              [&] { return LaunchTyped<scalar_t, float>(x, w, bias, out, mi, ni, ki, options, stream); });
  }
  return absl::InvalidArgumentError("Gemv: output dtype must be the input dtype or float32");
}

}  // namespace llm::cuda
