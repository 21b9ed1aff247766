// Tensor-core GEMM for a few rows of x (decode batches of 5 to 128 tokens): out[M, N] = x[M, K] ·
// W[N, K]ᵀ (+ bias), x in 16 bits, W in x's type, in E4M3 with one scale per row (per channel or
// per tensor: W8A16, widened exactly in registers), or in int4 codes of the W4A16 layout
// (w4a16_common.cuh) with a scale (and zero) a row and group of whole 128-column units (W4A16:
// (code - zero) formed exactly in registers, the scale applied to each unit's float32 sums).
//
// At these M the linear is bound by reading W once (M x 2 FLOPs a weight byte is far below the
// tensor cores' ridge), and cuBLASLt reads the 8B shapes at 50-80% of the bandwidth (its tiles
// leave SMs idle on narrow W and it re-reads W per M tile). This kernel keeps every SM streaming:
// W rows are the A operand of mma.m16n8k16 (16 weight rows), the tokens its B operand (8 an n8
// tile, all M in one block), so W is read exactly once; the (tile, K step) iterations of
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
#include "kernels/cuda/gemm/w4a16_weights.h"

namespace llm::cuda {

enum class GemmFewRowsWeightType { k16Bit, kE4M3, kInt4 };

// Rows of x a call takes: 64 with 16-bit or E4M3 weights (x's stages crowd out W's above), 128
// with int4 weights (a quarter of the stage bytes).
constexpr int GemmFewRowsMaxRows(GemmFewRowsWeightType type) {
  return type == GemmFewRowsWeightType::kInt4 ? 128 : 64;
}

// Device memory for straddling tiles' sums and counters: zero-filled once by the owner (the
// counters are zero again after every call). Calls that share one must run in stream order.
struct GemmFewRowsWorkspace {
  void* data = nullptr;
  size_t bytes = 0;
};
// The workspace that serves every call on a GPU of `num_sms` SMs.
size_t GemmFewRowsWorkspaceBytes(int num_sms);

struct GemmFewRowsWeights {
  GemmFewRowsWeightType type = GemmFewRowsWeightType::k16Bit;
  const void* data = nullptr;    // 16-bit or E4M3: [n, k]
  const float* scale = nullptr;  // E4M3: scale[row / scale_rows_per] (device)
  int64_t scale_rows_per = 1;    // 1: per channel; >= n: per tensor
  W4A16Weights int4;             // int4: k is the layout's storage columns (x in storage-column order)
};

// Whether the kernel takes this call: dtype bf16 or fp16, out of the same dtype, 1 <= m <=
// GemmFewRowsMaxRows(w.type), k a multiple of 128, x, W and out 16-byte aligned rows; int4: n a
// multiple of 16 (whole tiles of the layout) and groups of a power of two 128-column units in
// column order, or one group.
bool GemmFewRowsSupports(DType dtype, DType out_dtype, const GemmFewRowsWeights& w, int64_t m, int64_t n, int64_t k);

struct GemmFewRowsOptions {
  int tile_rows = 0;  // weight rows a tile: 128 or 256 (0: the kernel's rule; 256 with 16-bit weights
                      // takes 128-column steps; int4 weights take 128)
  int step_cols = 0;  // K columns a pipeline stage: 128 or 256 (0: the kernel's rule; halved until it divides k)
  bool pdl = false;   // programmatic dependent launch (W's first stages load before the wait)
  int token_split = 0;  // int4, 33+ rows of x: warps sharing an m16 tile, 1 or 2 (0: the kernel's rule, 2)
};

absl::Status LaunchGemmFewRows(DType dtype, const void* x, const GemmFewRowsWeights& w, const void* bias, void* out,
                               int64_t m, int64_t n, int64_t k, int num_sms, const GemmFewRowsWorkspace& workspace,
                               const GemmFewRowsOptions& options, Stream stream);

}  // namespace llm::cuda
