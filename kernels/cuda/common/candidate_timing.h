// Timing interchangeable kernels on their real operands, for the per-shape choices the CUDA
// backend makes once (GEMV forms against cuBLASLt, cuBLASLt's own algorithms).
#pragma once

#include <cuda_runtime.h>

#include <functional>
#include <vector>

#include "absl/status/statusor.h"

namespace llm::cuda {

struct CandidateTiming {
  int warmup = 2;  // rounds run first and not kept (module load, heuristics, clocks)
  int timed = 7;
  // A candidate whose run fails is dropped (+infinity) instead of failing the timing (e.g. a
  // cuBLASLt algorithm that cannot use the workspace).
  bool drop_failed = false;
};

// Runs the `count` candidates interleaved, round after round, on `stream`: before each run
// `before_each` (outside the timed span; e.g. pushing the weights out of L2), then run(c) between
// two events. Returns each candidate's median time in microseconds. Synchronizes `stream`.
absl::StatusOr<std::vector<float>> TimeCandidates(cudaStream_t stream, int count, const CandidateTiming& options,
                                                  const std::function<absl::Status()>& before_each,
                                                  const std::function<absl::Status(int)>& run);

// A device buffer larger than L2 (at least 64 MiB), written before each timed run so that the
// weights come from DRAM as they do in a step, where every layer has its own, plus
// `extra_bytes` of scratch after it. Allocated on the stream; empty (ok() false) where the GPU
// has no room beside the engine's arena: callers then skip timing and keep their default.
class L2Flush {
 public:
  L2Flush(cudaStream_t stream, size_t l2_bytes, size_t extra_bytes = 0);
  ~L2Flush();
  L2Flush(const L2Flush&) = delete;
  L2Flush& operator=(const L2Flush&) = delete;
  bool ok() const { return buffer_ != nullptr; }
  void* scratch() const { return static_cast<char*>(buffer_) + flush_bytes_; }
  absl::Status Flush();

 private:
  cudaStream_t stream_;
  size_t flush_bytes_;
  void* buffer_ = nullptr;
  int round_ = 0;
};

}  // namespace llm::cuda
