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

namespace llm::cuda {

// How the FP8 GEMM's float32 scales apply (cuBLASLt's matrix scale modes; Hopper supports all of
// them since CUDA 12.9).
enum class Fp8ScaleMode {
  kScalar,       // one value (device pointer)
  kOuterVector,  // weights: [N] (per channel); activations: [M] (per token)
  kBlock128,     // weights only: [ceil(N/128), ceil(K/128)] row-major (128 x 128 blocks)
  kVector128,    // activations only: [ceil(K/128), M], one per row and 128 columns, group-major
};

// out[M, N] = (x[M, K] · W[N, K]ᵀ) with E4M3 operands, each dequantized by its scales, (+ bias),
// fp32 accumulation, out in bf16/fp16.
struct Fp8GemmArgs {
  const void* x = nullptr;  // E4M3 [M, K]
  const void* w = nullptr;  // E4M3 [N, K]
  const float* x_scale = nullptr;
  const float* w_scale = nullptr;
  Fp8ScaleMode x_mode = Fp8ScaleMode::kScalar;
  Fp8ScaleMode w_mode = Fp8ScaleMode::kScalar;
  const void* bias = nullptr;  // [N] of out_dtype, or null
  void* out = nullptr;
  DType out_dtype = DType::kBF16;
  int64_t m = 0, n = 0, k = 0;
};

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
