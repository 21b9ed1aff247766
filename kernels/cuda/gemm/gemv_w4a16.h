// Int4-weight GEMV for decode (W4A16): out[M, N] = x[M, Kp] · dequant(W[N, Kp])ᵀ (+ bias) for
// M <= kGemvMaxRows, W in the repacked int4 layout (w4a16_common.cuh), x in 16 bits. At 1-8 rows
// the call is bound by streaming W: four bits a weight, a quarter of bf16's bytes. Each 16-byte
// load is one 32-column chunk of a row, dequantized in registers; the block's rows' scales and
// zeros and the chunk groups sit in shared memory, staged before the kernel waits on its
// predecessor (they are weights, not its outputs). Same two forms as the 16-bit GEMV (gemv.h):
// warps streaming rows through registers, or the shared-memory ring of bulk copies
// (gemv_smem_ring.cuh). x must already be in storage-column order (act-order: w4a16_permute.h).
#pragma once

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "kernels/core/dtype.h"
#include "kernels/cuda/common/stream.h"
#include "kernels/cuda/gemm/gemv.h"

namespace llm::cuda {

// Device pointers of an int4 weight (engine/core/storage_format.h).
struct W4A16Weights {
  const uint8_t* codes = nullptr;        // [n, kp / 2]
  const void* scales = nullptr;          // f16 [n, groups]
  const uint8_t* zeros = nullptr;        // [n, groups], or null: 8
  const int32_t* chunk_group = nullptr;  // [kp / 32]
  int64_t groups = 0;
};

// Whether the GEMV takes an N x Kp int4 weight of `groups` groups (Kp a multiple of 32, shared
// memory for the scales of the block's rows).
bool GemvW4A16Supported(DType dtype, int64_t n, int64_t kp, int64_t groups);
// Whether the ring form takes an M x Kp input of `dtype` against it.
bool GemvW4A16RingFits(DType dtype, int64_t m, int64_t n, int64_t kp, int64_t groups, size_t ring_bytes,
                       int num_sms);

// x and bias of `dtype` (bf16 or fp16), out of `out_dtype` (== dtype, or f32); x [m, kp].
// GemvOptions as for LaunchGemv (warps_per_row, smem_ring, ring_bytes, pdl).
absl::Status LaunchGemvW4A16(DType dtype, DType out_dtype, const void* x, const W4A16Weights& w, const void* bias,
                             void* out, int64_t m, int64_t n, int64_t kp, const GemvOptions& options, Stream stream);

}  // namespace llm::cuda
