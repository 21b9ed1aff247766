#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/common/cuda_status.h"
#include "kernels/cuda/common/device_utils.cuh"
#include "kernels/cuda/quant/fp8_gemm_scales.cuh"
#include "kernels/cuda/quant/fp8_gemm_scales.h"

namespace llm::cuda {
namespace {

constexpr int kThreads = 256;

// Each thread 4 consecutive columns of one row: one 16-byte load of sums, one 8-byte store. The
// scales and bias are no kernel's output: read before the dependency wait.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    ApplyFp8GemmScalesKernel(const float* __restrict__ sums, int64_t quads, int n4,
                             const float* __restrict__ x_scale, bool x_per_token,
                             const float* __restrict__ w_scale, bool w_per_row, const T* __restrict__ bias,
                             T* __restrict__ out) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  const bool live = i < quads;
  const int64_t t = live ? i / n4 : 0;
  const int c = live ? static_cast<int>(i % n4) * 4 : 0;
  float ws[4], b[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  if (live) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      ws[e] = __ldg(w_scale + (w_per_row ? c + e : 0));
      if (bias != nullptr) b[e] = ToFloat(bias[c + e]);
    }
  }
  GridDependencyWait();
  AllowDependentLaunch();
  if (!live) return;
  const float xs = __ldg(x_scale + (x_per_token ? t : 0));
  const float4 s = *reinterpret_cast<const float4*>(sums + i * 4);
  T r[4] = {ScaledFp8Sum<T>(s.x, xs, ws[0], b[0]), ScaledFp8Sum<T>(s.y, xs, ws[1], b[1]),
            ScaledFp8Sum<T>(s.z, xs, ws[2], b[2]), ScaledFp8Sum<T>(s.w, xs, ws[3], b[3])};
  *reinterpret_cast<uint2*>(out + t * (4 * int64_t{n4}) + c) = *reinterpret_cast<const uint2*>(r);
}

template <typename T>
absl::Status LaunchTyped(const float* sums, int64_t m, int64_t n, const float* x_scale, bool x_per_token,
                         const float* w_scale, bool w_per_row, const void* bias, void* out, Stream stream,
                         bool pdl) {
  const int64_t quads = m * (n / 4);
  CUDA_RETURN_IF_ERROR(LaunchKernel(
      ApplyFp8GemmScalesKernel<T>, dim3(static_cast<unsigned>((quads + kThreads - 1) / kThreads)),
      dim3(kThreads), 0, stream, pdl, sums, quads, static_cast<int>(n / 4), x_scale, x_per_token, w_scale,
      w_per_row, static_cast<const T*>(bias), static_cast<T*>(out)));
  return absl::OkStatus();
}

}  // namespace

absl::Status LaunchApplyFp8GemmScales(DType out_dtype, const float* sums, int64_t m, int64_t n,
                                      const float* x_scale, bool x_per_token, const float* w_scale,
                                      bool w_per_row, const void* bias, void* out, Stream stream, bool pdl) {
  // One thread a quad: the grid's blocks must fit gridDim.x.
  if (m < 0 || n <= 0 || n % 4 != 0 || n > 0x7fffffff || m > (int64_t{kThreads} * 0x7fffffff) / (n / 4) ||
      sums == nullptr || x_scale == nullptr || w_scale == nullptr || out == nullptr ||
      (out_dtype != DType::kBF16 && out_dtype != DType::kF16))
    return absl::InvalidArgumentError(absl::StrCat("ApplyFp8GemmScales: unsupported call m ", m, " n ", n,
                                                   " out ", std::string(DTypeName(out_dtype))));
  if (m == 0) return absl::OkStatus();
  if (out_dtype == DType::kBF16)
    return LaunchTyped<__nv_bfloat16>(sums, m, n, x_scale, x_per_token, w_scale, w_per_row, bias, out, stream,
                                      pdl);
  return LaunchTyped<__half>(sums, m, n, x_scale, x_per_token, w_scale, w_per_row, bias, out, stream, pdl);
}

}  // namespace llm::cuda
