// Matrix-vector products for decode: out[M, N] = x[M, K] · W[N, K]ᵀ (+ bias) for small M
// (<= kGemvMaxRows). Memory-bound: each warp streams one weight row with 16-byte loads (several in
// flight per lane) and reuses it for all M input rows; accumulation in float32.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/core/dtype.h"
#include "kernels/cuda/common/stream.h"

namespace llm::cuda {

inline constexpr int kGemvMaxRows = 8;

struct GemvOptions {
  // Launch with programmatic dependent launch, so that the weight prefetch overlaps the previous
  // kernel's tail.
  bool pdl = true;
  int num_sms = 132;
  // Warps that share one output row, each summing a contiguous slice of K (1, 2, 4 or 8; 0:
  // chosen so that the grid has enough blocks to balance the SMs for small N).
  int warps_per_row = 0;
  // Stream the weights through a ring of shared-memory stages filled by bulk copies instead
  // (gemv_smem_ring.cuh): deeper prefetch before the dependency wait, no registers held, and the
  // next kernel may launch as soon as the copies are issued. Shapes the form cannot take (see
  // GemvRingFits; unaligned pointers) use the register form.
  bool smem_ring = false;
  size_t ring_bytes = 0;  // ring per block (0: all the shared memory that x and the partials leave)
  // > 0: the gate/up form (register form, one warp a row, F = glu_cols a multiple of 4): W is
  // [2F, K] (gate rows, then up rows) and out [M, F] = silu(x·gateᵀ) * (x·upᵀ), each product
  // rounded to the input dtype first, as Linear then SiluMul would (GemvGluTakes).
  int64_t glu_cols = 0;
};

// Whether the gate/up form of F = glu_cols takes an N x K weight (N = 2F, F a multiple of 4);
// its output is in the input dtype.
inline bool GemvGluTakes(int64_t glu_cols, int64_t n, int64_t k) {
  return glu_cols > 0 && glu_cols * 2 == n && glu_cols % 4 == 0 && k > 0;
}

// Whether the shared-memory ring form takes an M x K input against an N x K weight of `dtype`
// with `ring_bytes` (0: as much as fits) of ring a block.
bool GemvRingFits(DType dtype, int64_t m, int64_t n, int64_t k, size_t ring_bytes, int num_sms);

// The warps per row that GemvOptions::warps_per_row = 0 picks for an N x K weight of `dtype`.
int GemvAutoWarpsPerRow(DType dtype, int64_t n, int64_t k, int num_sms);

// x, w, bias of `dtype`; out of `out_dtype` (== dtype, or f32).
absl::Status LaunchGemv(DType dtype, DType out_dtype, const void* x, const void* w, const void* bias, void* out,
                        int64_t m, int64_t n, int64_t k, const GemvOptions& options, Stream stream);

}  // namespace llm::cuda
