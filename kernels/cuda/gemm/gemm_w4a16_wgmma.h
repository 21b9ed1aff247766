// W4A16 GEMM on Hopper's warpgroup MMAs for decode batches of tens to hundreds of tokens:
// out[M, N] = x[M, K] · dequant(W[N, K])ᵀ (+ bias), W in the repacked int4 layout
// (w4a16_common.cuh) with one scale (and zero) a row and group of whole 128-column units, x and
// out in bf16 or fp16.
//
// From ~64 rows a 4-bit linear is bound by the tensor cores, not by its bytes (2 x M FLOPs a
// weight against half a byte), and the mma.sync GEMMs (gemm_few_rows.h) reach a third of their
// rate. Here W's rows are the A operand of wgmma.m64nNk16 taken from registers: each warp of a
// consumer warpgroup forms its 16-row tile's fragments from the codes in shared memory ((code -
// zero) exactly, as the other int4 kernels), and the tokens (all of a call's M, up to 128 a pass)
// are the B operand, staged by TMA with the 128-byte swizzle. A producer warp keeps a ring of
// stages full (a stage: one 128-column unit of the block's 128 rows, bulk-copied, and the tokens'
// 128 columns); each unit's sums are kept apart and scaled into float32 totals, so the result is
// the exact sum of exact products in float32, as the CPU oracle's. The (128-row tile, unit)
// iterations of the whole GEMM are split evenly over one block an SM (stream-K, stream_k.cuh).
#pragma once

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "kernels/core/dtype.h"
#include "kernels/cuda/common/stream.h"
#include "kernels/cuda/gemm/w4a16_weights.h"

namespace llm::cuda {

// Tokens a pass takes; a call of more rows runs one pass per 128 (each reads W again).
inline constexpr int kGemmW4A16WgmmaPassRows = 128;

// Whether the kernel takes the call: dtype bf16 or fp16, out of the same dtype, m >= 1, n a
// multiple of 16 (whole tiles of the layout), kp (storage columns) a multiple of 128, groups of
// a power of two whole units in column order or one group, x, codes and out 16-byte aligned, and
// a driver that encodes TMA tensor maps.
bool GemmW4A16WgmmaSupports(DType dtype, DType out_dtype, const W4A16Weights& w, int64_t m, int64_t n, int64_t kp,
                            const void* x, const void* out);

// Device memory for straddling tiles' sums and counters, as the few-rows GEMM's (zero-filled
// once; the counters are zero again after every call; calls sharing it run in stream order).
size_t GemmW4A16WgmmaWorkspaceBytes(int num_sms);

struct GemmW4A16WgmmaOptions {
  bool pdl = false;  // programmatic dependent launch: the first stages' codes load before the wait
};

// x [m, kp] in storage-column order (act-order inputs permuted first), out [m, n].
absl::Status LaunchGemmW4A16Wgmma(DType dtype, const void* x, const W4A16Weights& w, const void* bias, void* out,
                                  int64_t m, int64_t n, int64_t kp, int num_sms, void* workspace,
                                  size_t workspace_bytes, const GemmW4A16WgmmaOptions& options, Stream stream);

}  // namespace llm::cuda
