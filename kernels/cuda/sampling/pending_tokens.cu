#include "kernels/cuda/sampling/pending_tokens.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/common/cuda_status.h"

namespace llm::cuda {
namespace {

__global__ void ResolvePendingTokensKernel(int32_t* __restrict__ ids, int64_t n, const int32_t* __restrict__ sampled,
                                           int64_t num_sampled) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int32_t id = ids[i];
    if (id >= 0) continue;
    const int64_t row = -static_cast<int64_t>(id) - 1;
    ids[i] = row < num_sampled ? sampled[row] : 0;
  }
}

}  // namespace

absl::Status LaunchResolvePendingTokens(int32_t* ids, int64_t n, const int32_t* sampled, int64_t num_sampled,
                                        Stream stream) {
  if (n < 0 || num_sampled < 0) return absl::InvalidArgumentError(absl::StrCat("ResolvePendingTokens: bad sizes ", n));
  if (n == 0) return absl::OkStatus();
  constexpr int kThreads = 256;
  const int64_t blocks = std::min<int64_t>((n + kThreads - 1) / kThreads, 1024);
  ResolvePendingTokensKernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(ids, n, sampled, num_sampled);
  CUDA_RETURN_IF_LAUNCH_ERROR();
  return absl::OkStatus();
}

}  // namespace llm::cuda
