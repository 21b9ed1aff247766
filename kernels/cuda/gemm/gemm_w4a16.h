// Int4-weight GEMM for prefill and batches past the GEMV's rows (W4A16): out[M, N] = x[M, Kp] ·
// dequant(W[N, Kp])ᵀ (+ bias) on the tensor cores (mma.sync m16n8k16, 16-bit operands, float32
// accumulation). x tiles and packed code tiles (a quarter of a 16-bit weight's bytes) stream
// through a 3-stage cp.async pipeline; each lane turns one 32-bit word of a code tile into its B
// fragments of two k16 steps in registers, as (code - zero) exactly in the 16-bit type
// (w4a16_common.cuh); each 32-column chunk's partial sums are multiplied by their rows' scales in
// float32. Two tile shapes: 128 x 128 for large M, 64 x 64 where 128-row tiles would leave SMs idle.
// x must already be in storage-column order (act-order: w4a16_permute.h).
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/core/dtype.h"
#include "kernels/cuda/common/stream.h"
#include "kernels/cuda/gemm/w4a16_weights.h"

namespace llm::cuda {

// x, bias of `dtype` (bf16/fp16), out of `out_dtype` (== dtype or f32); x [m, kp], kp a multiple
// of 32; x and codes 16-byte aligned. `num_sms` picks the tile shape.
absl::Status LaunchGemmW4A16(DType dtype, DType out_dtype, const void* x, const W4A16Weights& w, const void* bias,
                             void* out, int64_t m, int64_t n, int64_t kp, int num_sms, Stream stream);

}  // namespace llm::cuda
