// Int4-weight GEMV on the tensor cores for decode batches (W4A16): out[M, N] = x[M, Kp] ·
// dequant(W[N, Kp])ᵀ (+ bias) for M <= kGemvW4A16MmaMaxRows, W in the repacked int4 layout
// (w4a16_common.cuh), x in 16 bits, float32 sums.
//
// Bound by streaming W (half a byte a weight), so the kernel keeps the per-byte instruction count
// low: the weights are the A operand of mma.m16n8k16 (16 weight rows), the batch rows its B
// operand (8 tokens an n8 tile, up to 4 tiles), so the multiply-adds cost nothing on the CUDA
// cores; each lane streams whole 16-byte chunks (one 32-column chunk of two weight rows per unit)
// and turns each 32-bit code word into 4 exact (code - zero) pairs with a shift, a LOP3 and one
// 16-bit subtraction. A warp covers a 16-row tile of W and a slice of its K; several warps split
// K (within a block, summed in shared memory) so that narrow weights still fill every SM.
// x must already be in storage-column order (act-order: w4a16_permute.h).
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/core/dtype.h"
#include "kernels/cuda/common/stream.h"
#include "kernels/cuda/gemm/w4a16_weights.h"
#include "kernels/cuda/norm/fused_rms_norm.h"
#include "kernels/cuda/rope/qkv_rope.h"

namespace llm::cuda {

inline constexpr int kGemvW4A16MmaMaxRows = 32;

// How the GEMV runs (the defaults: the kernel's own choices).
struct GemvW4A16MmaOptions {
  int warps_per_tile = 0;  // warps splitting each tile's K: 1, 2, 4, 8 (0: the kernel's rule)
  // Codes straight to registers, or through shared-memory stages filled by bulk copies. kAuto, by
  // measurement (benchmarks/RESULTS.md): bulk with two tiles a warp, 8-chunk stages, 4 stages above
  // 16 rows of x (x's fragments shared by two tiles), registers up to 16.
  enum class Form { kAuto, kRegisters, kBulk };
  Form form = Form::kAuto;
  int tiles_per_warp = 0;  // bulk: 16-row tiles a warp, 1 or 2 (0: 1 up to 8 rows of x, else 2)
  int stage_chunks = 0;    // bulk: 32-column chunks of each row a stage, 8, 16 or 32 (0: 16 a tile, 8 two)
  int stages = 0;          // bulk: stages of a warp's ring (0: 2 a tile, 4 two)
  bool pdl = false;        // programmatic dependent launch
  // 5-32 rows of x: room for x rewritten in the order the lanes read it
  // (GemvW4A16MmaXWorkspaceBytes), which a small kernel does first (from 9 rows; from 5 for very
  // wide weights, at least 8 tiles an SM; with `norm` at 9-32 rows that kernel forms the norm
  // too, and the workspace is required). Read in place instead, x's
  // loads cost 4x the L1 wavefronts, and the L1 limits the kernel there (benchmarks/RESULTS.md).
  void* x_workspace = nullptr;
  size_t x_workspace_bytes = 0;
  // > 0: the gate/up form (register form; F = glu_cols a multiple of 16): W is [2F, Kp] (gate rows,
  // then up rows) and out [M, F] = silu(x·gateᵀ) * (x·upᵀ), each product rounded to the input
  // dtype first, as Linear then SiluMul would.
  int64_t glu_cols = 0;
  // The register form, 16-bit out, as GemvOptions::norm and ::add_to_out (gemv.h): x holds the rows
  // before their RMSNorm, and/or out holds a residual that the product is added into (not with the
  // gate/up form). Up to 8 rows every block forms the norm into shared memory itself; at 9-32 rows
  // (x_workspace needed) the kernel that rewrites x in fragment order forms it, in place of the
  // norm kernel and the plain reordering. x in input order (no act-order permutation): the norm
  // weight is in that order. GemvW4A16MmaFuses says where.
  FusedRmsNorm norm;
  bool add_to_out = false;
  // Set: the QKV projection's outputs go through RoPE into rope->q_out and the KV cache instead
  // of `out` (as GemvOptions::rope; up to 8 rows, where GemvW4A16MmaRopeSameSums).
  const QkvRopeParams* rope = nullptr;
};

// Bytes GemvW4A16MmaOptions::x_workspace needs for m rows of kp storage columns (0: no use for it).
size_t GemvW4A16MmaXWorkspaceBytes(int64_t m, int64_t kp);

// Whether the QKV-RoPE end (GemvW4A16MmaOptions::rope) takes an m x n x kp call with the same K
// split as the plain call's (so that it changes no bit): a block's tiles pair whole halves of heads.
bool GemvW4A16MmaRopeSameSums(int64_t m, int64_t n, int64_t kp, int num_sms, const QkvRopeParams& rope);

// Whether the kernel can take GemvW4A16MmaOptions::norm / ::add_to_out for an m x kp input and N
// rows (glu_cols: the gate/up form's F) on num_sms SMs: the register form. Up to 8 rows each block
// forms the norm itself, where m * kp 16-bit values fit kGemvNormMaxBytes and the grid is one wave
// (every wave of blocks would pay the norm's latency again); at 9-32 rows x goes through the x
// workspace in fragment order (x_workspace_bytes at least GemvW4A16MmaXWorkspaceBytes) and the
// kernel that reorders it forms the norm (rows the norm kernel holds in registers).
bool GemvW4A16MmaFuses(int64_t m, int64_t n, int64_t kp, bool norm, int64_t glu_cols, int num_sms,
                       size_t x_workspace_bytes);

// Whether the gate/up form (GemvW4A16MmaOptions::glu_cols = n / 2) sums exactly as the plain
// call of the same m x n x kp does (the same warps a tile splitting K; the plain call up to 16 rows
// is the register form too), so that fusing changes no output bit: m <= 16, n / 2 a multiple of
// 16, and the plain call's warps a tile leave at least two tiles a block.
bool GemvW4A16MmaGluSameSums(int64_t m, int64_t n, int64_t kp, int num_sms);

// x and bias of `dtype` (bf16 or fp16), out of `out_dtype` (== dtype, or f32); x [m, kp], kp a
// multiple of 32, x and codes 16-byte aligned. `warps_per_tile` 0: the kernel's own rule
// (1, 2, 4 or 8 warps splitting each 16-row tile's K). `pdl`: programmatic dependent launch.
absl::Status LaunchGemvW4A16Mma(DType dtype, DType out_dtype, const void* x, const W4A16Weights& w, const void* bias,
                                void* out, int64_t m, int64_t n, int64_t kp, int num_sms, int warps_per_tile, bool pdl,
                                Stream stream);
absl::Status LaunchGemvW4A16Mma(DType dtype, DType out_dtype, const void* x, const W4A16Weights& w, const void* bias,
                                void* out, int64_t m, int64_t n, int64_t kp, int num_sms,
                                const GemvW4A16MmaOptions& options, Stream stream);

}  // namespace llm::cuda
