// Tensor-core GEMM for a few rows of x (decode batches of 5 to 64 tokens): out[M, N] = x[M, K] ·
// W[N, K]ᵀ (+ bias), x in 16 bits, W in x's type or E4M3 with one scale per row (per channel or
// per tensor: W8A16, widened exactly in registers), float32 sums.
//
// At these M the linear is bound by reading W once (M x 2 FLOPs a weight byte is far below the
// tensor cores' ridge), and cuBLASLt reads the 8B shapes at 50-80% of the bandwidth (its tiles
// leave SMs idle on narrow W and it re-reads W per M tile). This kernel keeps every SM streaming:
// W rows are the A operand of mma.m16n8k16 (16 weight rows), the tokens its B operand (8 an n8
// tile, all M in one block), so W is read exactly once; the (tile, 64-column step) iterations of
// the whole GEMM are cut into one equal contiguous range per block (stream-K), so every SM reads
// the same number of bytes whatever N and K are. A tile that straddles blocks: each contributor
// stores its float32 sums in a workspace slot of its own, and the last to arrive (a counter per
// tile, reset by it) adds them in block order and writes the output: deterministic, graph-safe.
#pragma once

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "kernels/core/dtype.h"
#include "kernels/cuda/common/stream.h"

namespace llm::cuda {

inline constexpr int kGemmFewRowsMaxRows = 64;

// Device memory for straddling tiles' sums and counters: zero-filled once by the owner (the
// counters are zero again after every call). Calls that share one must run in stream order.
struct GemmFewRowsWorkspace {
  void* data = nullptr;
  size_t bytes = 0;
};
// The workspace that serves every call on a GPU of `num_sms` SMs.
size_t GemmFewRowsWorkspaceBytes(int num_sms);

// Whether the kernel takes this call: dtype bf16 or fp16, out of the same dtype, 1 <= m <=
// kGemmFewRowsMaxRows, k a multiple of 128, x, W and out 16-byte aligned rows.
bool GemmFewRowsSupports(DType dtype, DType out_dtype, int64_t m, int64_t n, int64_t k);

struct GemmFewRowsOptions {
  int tile_rows = 0;  // weight rows a tile: 128 or 256 (0: the kernel's rule; 256 with 16-bit weights
                      // takes 128-column steps)
  int step_cols = 0;  // K columns a pipeline stage: 128 or 256 (0: the kernel's rule; halved until it divides k)
  bool pdl = false;   // programmatic dependent launch (W's first stages load before the wait)
};

struct GemmFewRowsWeights {
  const void* data = nullptr;  // [n, k]
  bool fp8 = false;            // E4M3 (else x's dtype)
  const float* scale = nullptr;  // E4M3: scale[row / scale_rows_per] (device)
  int64_t scale_rows_per = 1;    // 1: per channel; >= n: per tensor
};

absl::Status LaunchGemmFewRows(DType dtype, const void* x, const GemmFewRowsWeights& w, const void* bias, void* out,
                               int64_t m, int64_t n, int64_t k, int num_sms, const GemmFewRowsWorkspace& workspace,
                               const GemmFewRowsOptions& options, Stream stream);

}  // namespace llm::cuda
