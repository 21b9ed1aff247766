#include "kernels/cuda/common/candidate_timing.h"

#include <algorithm>
#include <limits>

#include "kernels/cuda/common/cuda_status.h"

namespace llm::cuda {

absl::StatusOr<std::vector<float>> TimeCandidates(cudaStream_t stream, int count, const CandidateTiming& options,
                                                  const std::function<absl::Status()>& before_each,
                                                  const std::function<absl::Status(int)>& run) {
  cudaEvent_t start = nullptr, stop = nullptr;
  CUDA_RETURN_IF_ERROR(cudaEventCreate(&start));
  if (cudaError_t err = cudaEventCreate(&stop); err != cudaSuccess) {
    cudaEventDestroy(start);
    return CudaError(err, "cudaEventCreate", __FILE__, __LINE__);
  }
  struct EventGuard {
    cudaEvent_t a, b;
    ~EventGuard() {
      cudaEventDestroy(a);
      cudaEventDestroy(b);
    }
  } guard{start, stop};
  std::vector<std::vector<float>> times(count);
  std::vector<bool> failed(count, false);
  for (int i = 0; i < options.warmup + options.timed; ++i) {
    for (int c = 0; c < count; ++c) {
      if (failed[c]) continue;
      RETURN_IF_ERROR(before_each());
      CUDA_RETURN_IF_ERROR(cudaEventRecord(start, stream));
      if (absl::Status s = run(c); !s.ok()) {
        if (!options.drop_failed) return s;
        failed[c] = true;
        continue;
      }
      CUDA_RETURN_IF_ERROR(cudaEventRecord(stop, stream));
      CUDA_RETURN_IF_ERROR(cudaEventSynchronize(stop));
      float ms = 0.0f;
      CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&ms, start, stop));
      if (i >= options.warmup) times[c].push_back(1e3f * ms);
    }
  }
  std::vector<float> median(count, std::numeric_limits<float>::infinity());
  for (int c = 0; c < count; ++c) {
    if (failed[c] || times[c].empty()) continue;
    std::sort(times[c].begin(), times[c].end());
    median[c] = times[c][times[c].size() / 2];
  }
  return median;
}

L2Flush::L2Flush(cudaStream_t stream, size_t l2_bytes, size_t extra_bytes)
    : stream_(stream), flush_bytes_(std::max<size_t>(2 * l2_bytes, size_t{64} << 20)) {
  if (cudaMallocAsync(&buffer_, flush_bytes_ + extra_bytes, stream_) != cudaSuccess) {
    buffer_ = nullptr;
    cudaGetLastError();  // not a sticky error: leave nothing for the next launch check
  }
}

L2Flush::~L2Flush() {
  if (buffer_ != nullptr) cudaFreeAsync(buffer_, stream_);
}

absl::Status L2Flush::Flush() {
  CUDA_RETURN_IF_ERROR(cudaMemsetAsync(buffer_, ++round_ & 0xff, flush_bytes_, stream_));
  return absl::OkStatus();
}

}  // namespace llm::cuda
