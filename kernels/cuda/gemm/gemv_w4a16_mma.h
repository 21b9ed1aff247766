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
#include "kernels/cuda/gemm/gemv_w4a16.h"

namespace llm::cuda {

inline constexpr int kGemvW4A16MmaMaxRows = 32;

// x and bias of `dtype` (bf16 or fp16), out of `out_dtype` (== dtype, or f32); x [m, kp], kp a
// multiple of 32, x and codes 16-byte aligned. `warps_per_tile` 0: the kernel's own rule
// (1, 2, 4 or 8 warps splitting each 16-row tile's K). `pdl`: programmatic dependent launch.
absl::Status LaunchGemvW4A16Mma(DType dtype, DType out_dtype, const void* x, const W4A16Weights& w, const void* bias,
                                void* out, int64_t m, int64_t n, int64_t kp, int num_sms, int warps_per_tile, bool pdl,
                                Stream stream);

}  // namespace llm::cuda
