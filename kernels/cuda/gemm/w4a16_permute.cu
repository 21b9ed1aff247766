#include "kernels/cuda/gemm/w4a16_permute.h"

#include "kernels/cuda/common/cuda_status.h"
#include "kernels/cuda/common/device_utils.cuh"

namespace llm::cuda {
namespace {

constexpr int kThreads = 256;

// One thread per output element; a block's threads cover consecutive storage columns of one row,
// so the permutation reads are coalesced and x's row stays in L1.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    PermuteColumnsKernel(const T* __restrict__ x, const int32_t* __restrict__ perm, T* __restrict__ out, int k,
                         int kp) {
  const int row = blockIdx.y;
  const int j = blockIdx.x * kThreads + threadIdx.x;
  const int src = j < kp ? __ldg(perm + j) : -1;
  GridDependencyWait();
  AllowDependentLaunch();
  if (j >= kp) return;
  out[static_cast<int64_t>(row) * kp + j] = src >= 0 ? x[static_cast<int64_t>(row) * k + src] : FromFloat<T>(0.0f);
}

}  // namespace

absl::Status LaunchW4A16PermuteColumns(DType dtype, const void* x, const int32_t* perm, void* out, int64_t m,
                                       int64_t k, int64_t kp, Stream stream, bool pdl) {
  if (m < 0 || m > 65535 || k <= 0 || kp < k || kp > 0x7fffffff || perm == nullptr)
    return absl::InvalidArgumentError(absl::StrCat("W4A16PermuteColumns: unsupported shape m ", m, " k ", k, " kp ", kp));
  if (m == 0) return absl::OkStatus();
  const dim3 grid(static_cast<unsigned>((kp + kThreads - 1) / kThreads), static_cast<unsigned>(m));
  const int ki = static_cast<int>(k), kpi = static_cast<int>(kp);
  if (dtype == DType::kBF16) {
    CUDA_RETURN_IF_ERROR(LaunchKernel(PermuteColumnsKernel<__nv_bfloat16>, grid, dim3(kThreads), 0, stream, pdl,
                                      static_cast<const __nv_bfloat16*>(x), perm, static_cast<__nv_bfloat16*>(out), ki,
                                      kpi));
    return absl::OkStatus();
  }
  if (dtype == DType::kF16) {
    CUDA_RETURN_IF_ERROR(LaunchKernel(PermuteColumnsKernel<__half>, grid, dim3(kThreads), 0, stream, pdl,
                                      static_cast<const __half*>(x), perm, static_cast<__half*>(out), ki, kpi));
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError("W4A16PermuteColumns: bf16 or fp16 inputs");
}

}  // namespace llm::cuda
