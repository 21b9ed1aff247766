// Matrix-vector products for decode: out[M, N] = x[M, K] · W[N, K]ᵀ (+ bias) for small M
// (<= kGemvMaxRows). Memory-bound: each warp streams one weight row with 16-byte loads (several in
// flight per lane) and reuses it for all M input rows; accumulation in float32.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/core/dtype.h"
#include "kernels/cuda/common/stream.h"
#include "kernels/cuda/norm/fused_rms_norm.h"
#include "kernels/cuda/rope/qkv_rope.h"

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
  // Set: x holds the rows before their RMSNorm, which every block forms itself into shared memory
  // (rms_norm_prologue.cuh) with the norm kernel's sums and roundings (the FP8 register form up to
  // kGemvNormMaxBytes of x: GemvNormTakes; 16-bit out). Measured and not kept in the ring forms,
  // which stage x anyway: the 8B bf16 step 0.5-1% slower at 1-2 rows on an H200.
  FusedRmsNorm norm;
  // out holds a residual that the product is added into, in place: out = T(out + T(x·Wᵀ + b)), the
  // roundings of Linear then AddRmsNorm's add (the same form, 16-bit out, not the gate/up form).
  bool add_to_out = false;
  // Set: W is the QKV projection of rope->num_heads + 2 num_kv_heads heads, and its outputs go
  // through RoPE into rope->q_out and the KV cache instead of `out`, as QkvRope would write them
  // from the 16-bit product (the FP8 register form, one warp a row: GemvRopeTakes).
  const QkvRopeParams* rope = nullptr;
};

// Whether the register GEMV's QKV-RoPE end takes an N-row projection for `rope`: no q/k norms
// (they need whole heads), rotation over whole heads of a multiple of 8 elements.
inline bool GemvRopeTakes(int64_t n, const QkvRopeParams& rope) {
  return rope.q_norm == nullptr && rope.k_norm == nullptr && rope.head_dim > 0 && rope.head_dim % 8 == 0 &&
         rope.rotary_dim == rope.head_dim && rope.inv_freq != nullptr && rope.q_out != nullptr &&
         n == int64_t{rope.num_heads + 2 * rope.num_kv_heads} * rope.head_dim;
}

inline constexpr int64_t kGemvNormMaxBytes = 32 << 10;

// Whether a register GEMV can form the RMSNorm of its m x k input itself (GemvOptions::norm): rows
// of whole 16-byte vectors that the norm kernel's held form takes (its walk is the fused norm's),
// staged in shared memory for the norm alone, up to kGemvNormMaxBytes.
inline bool GemvNormTakes(int64_t m, int64_t k, int64_t elem_bytes) {
  return m >= 1 && k > 0 && k % (16 / elem_bytes) == 0 && RmsNormHeldChunks(k * elem_bytes / 16) > 0 &&
         m * k * elem_bytes <= kGemvNormMaxBytes;
}

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
