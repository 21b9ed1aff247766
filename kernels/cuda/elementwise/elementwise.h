// Elementwise launchers: residual add, SiLU-and-mul, dtype conversion and random fill.
// Pointers are device pointers of `dtype` elements unless stated; every launcher checks its sizes
// and returns the launch error.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/core/dtype.h"
#include "kernels/cuda/common/stream.h"
#include "kernels/cuda/quant/fp8_quantize.h"

namespace llm::cuda {

// x[i] += y[i], i < n.
absl::Status LaunchAdd(DType dtype, void* x, const void* y, int64_t n, Stream stream);

// out[r, i] = silu(gate_up[r, i]) * gate_up[r, f + i]; gate_up [rows, 2f], out [rows, f].
// `pdl`: launched with programmatic dependent launch (the kernel waits for its predecessor before
// touching memory; only its launch overlaps the predecessor's tail).
absl::Status LaunchSiluMul(DType dtype, const void* gate_up, void* out, int64_t rows, int64_t f, Stream stream,
                           bool pdl = false);
// LaunchSiluMul, also writing out quantized to FP8 per row (or by a static scale) for the W8A8
// linear that reads it (fp8_quantize.h): one block a row. out bit-identical to LaunchSiluMul's
// (with quantized.values_unused it may be left unwritten).
absl::Status LaunchSiluMulFp8(DType dtype, const void* gate_up, void* out, int64_t rows, int64_t f,
                              const Fp8RowOutput& quantized, Stream stream, bool pdl = false);

// out[r, c] += bias[c] for out [rows, cols] of `out_dtype` (== dtype or f32), bias of `dtype`.
absl::Status LaunchAddBias(DType dtype, DType out_dtype, void* out, const void* bias, int64_t rows, int64_t cols,
                           Stream stream);

// dst[i] = (dst_dtype) src[i] for floating dtypes (f32/f16/bf16; dst also f8e4m3, rounded to
// nearest even and saturated), i < n.
absl::Status LaunchConvert(DType src_dtype, const void* src, DType dst_dtype, void* dst, int64_t n, Stream stream);

// dst[i] = low + (high - low) * uniform(seed, i): Philox, so the same seed gives the same tensor
// (floating dtypes and f8e4m3).
absl::Status LaunchFillUniform(DType dtype, void* dst, int64_t n, uint64_t seed, float low, float high,
                               Stream stream);

// dst[i] = value (raw 32-bit / 16-bit patterns for poisoning test outputs): fills `bytes` bytes
// with the repeated 32-bit `pattern`. `bytes` must be a multiple of 4.
absl::Status LaunchFillPattern(void* dst, int64_t bytes, uint32_t pattern, Stream stream);

}  // namespace llm::cuda
