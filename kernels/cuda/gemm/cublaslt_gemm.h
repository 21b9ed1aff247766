// cuBLASLt GEMM for the linear layers: out[M, N] = x[M, K] · W[N, K]ᵀ (+ bias[N]), row-major, fp32
// accumulation (no TF32 for float32 inputs). One heuristic query per distinct shape/alignment,
// cached (its first pick, or the fastest of its picks after Tune); the workspace is caller-owned
// and fixed, so calls can be captured in a CUDA graph.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/core/dtype.h"
#include "kernels/cuda/common/stream.h"
#include "kernels/cuda/gemm/fp8_gemm_args.h"

namespace llm::cuda {

class CublasLtGemm {
 public:
  // `workspace` (device) must outlive this object.
  static absl::StatusOr<std::unique_ptr<CublasLtGemm>> Create(void* workspace, size_t workspace_bytes);
  ~CublasLtGemm();
  CublasLtGemm(const CublasLtGemm&) = delete;
  CublasLtGemm& operator=(const CublasLtGemm&) = delete;

  // Plans RunFp8's GEMM for these shapes, modes and operand alignments without running it:
  // Unimplemented when cuBLASLt has no algorithm (or refuses the combination).
  absl::Status PlanFp8(const Fp8GemmArgs& args);

  // x, w (and bias) of `dtype`; out of `out_dtype` (== dtype, or f32). `ldc`: elements between
  // out's rows (0: n), for writing a column slice of a wider output.
  absl::Status Run(DType dtype, DType out_dtype, const void* x, const void* w, const void* bias, void* out, int64_t m,
                   int64_t n, int64_t k, Stream stream, int64_t ldc = 0);

  // Times up to `candidates` of cuBLASLt's heuristic algorithms for this call's shape on its
  // operands (`before_each` runs before every timed call, e.g. to push the weights out of L2) and
  // keeps the fastest for the shape: the heuristic's first pick is often not it for decode-sized
  // M. Synchronizes `stream`. Returns each candidate's median time in microseconds, the
  // heuristic's pick first (an algorithm that fails to run gets +infinity).
  absl::StatusOr<std::vector<float>> Tune(DType dtype, DType out_dtype, const void* x, const void* w, const void* bias,
                                          void* out, int64_t m, int64_t n, int64_t k, Stream stream, int candidates,
                                          const std::function<absl::Status()>& before_each);

  // Unimplemented when cuBLASLt has no algorithm for the combination (scale modes, alignment,
  // K not a multiple of 16): the caller then takes another kernel.
  absl::Status RunFp8(const Fp8GemmArgs& args, Stream stream);

  size_t cached_plans() const;

 private:
  struct Impl;
  explicit CublasLtGemm(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace llm::cuda
