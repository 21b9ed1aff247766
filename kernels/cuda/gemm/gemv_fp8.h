// FP8 weight GEMV for decode: out[M, N] = x[M, K] · dequant(W[N, K])ᵀ (+ bias) for M <=
// kGemvMaxRows, W stored as E4M3 bytes with float32 scales (per tensor, per channel, 128 x 128
// blocks or per-row 128-column groups). x stays in its 16-bit dtype (W8A16): at 1-8 rows the
// call is bound by streaming W, which FP8 halves, and quantizing x would only add a kernel and
// error. Each 16-byte weight vector (16 elements) is dequantized in registers; its scale
// multiplies the vector's partial dot products (grouped scales) or the row's sum (per tensor /
// channel). Same two forms as the 16-bit GEMV (gemv.h): warps streaming rows through registers,
// or the shared-memory ring of bulk copies (gemv_smem_ring.cuh).
#pragma once

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "kernels/core/dtype.h"
#include "kernels/cuda/common/stream.h"
#include "kernels/cuda/gemm/gemv.h"

namespace llm::cuda {

// Where weight element (n, k)'s scale is: scale[(n / rows_per) * cols + k / cols_per]
// (engine/core/storage_format.h's ScaleGrid).
struct Fp8WeightScales {
  const float* scale = nullptr;  // device
  int64_t rows_per = 1;          // 1: per channel or group; N: per tensor; 128: blocks
  int64_t cols_per = 1;          // 128: blocks and groups; >= K: per tensor or channel
  int64_t cols = 1;              // columns of the scale grid
};

// Whether the FP8 GEMV takes this shape and scale grid: K a multiple of 16, scales per 128
// columns or per whole row.
bool GemvFp8Supported(DType dtype, int64_t k, const Fp8WeightScales& scales);

// The register form's warps a row where GemvOptions::warps_per_row is 0.
int GemvFp8AutoWarpsPerRow(int64_t n, int64_t k, int num_sms);

// Whether the ring form takes an M x K input of `dtype` against an N x K FP8 weight.
bool GemvFp8RingFits(DType dtype, int64_t m, int64_t n, int64_t k, size_t ring_bytes, int num_sms);

// Whether the ring's tensor-core form (gemv_fp8_mma.cuh) takes this call: one scale a row (per
// tensor or channel), K a multiple of 64, x (as f16) fitting in shared memory beside the ring.
bool GemvFp8MmaFits(DType dtype, int64_t m, int64_t n, int64_t k, const Fp8WeightScales& scales, size_t ring_bytes,
                    int num_sms);

// x and bias of `dtype` (bf16 or fp16), out of `out_dtype` (== dtype, or f32), w E4M3 [N, K].
// GemvOptions as for LaunchGemv (warps_per_row, smem_ring, ring_bytes, pdl). With smem_ring, the
// tensor-core form where it fits (GemvFp8MmaFits) unless !tensor_cores, else the CUDA-core ring.
absl::Status LaunchGemvFp8(DType dtype, DType out_dtype, const void* x, const void* w, const Fp8WeightScales& scales,
                           const void* bias, void* out, int64_t m, int64_t n, int64_t k, const GemvOptions& options,
                           Stream stream, bool tensor_cores = true);

}  // namespace llm::cuda
