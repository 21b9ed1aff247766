// Activation quantization for the FP8 GEMMs: q = e4m3(x / s), one scale s per row (per token),
// per row and 128-column group, or a static one, with Fp8ScaleForAmax (kernels/core/fp8_scale.h)
// for the dynamic ones, exactly as the CPU oracle's emulation (cpu::FakeQuantizeFp8) computes them.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/core/dtype.h"
#include "kernels/cuda/common/stream.h"

namespace llm::cuda {

enum class Fp8ActivationScaling {
  kPerToken,    // scales [m]
  kPerGroup,    // scales [ceil(k / 128), m]: group-major, so that a group's scales of consecutive
                // rows are contiguous (cuBLASLt's VEC128_32F B-operand scales)
  kStatic,      // scales unused: *static_scale (device) for every element
};

// Where a row kernel (RMSNorm, SiLU-and-mul) also writes its output quantized per token or by a
// static scale, for the W8A8 linear that reads it (fp8_row_quantize.cuh): codes [rows, dim] E4M3
// (8-byte aligned), and per row its scale (scales[row]; static_scale null) or none (every
// element scaled by *static_scale, on the device). The codes and scales LaunchQuantizeFp8 would
// compute from the stored output (kPerToken or kStatic).
struct Fp8RowOutput {
  uint8_t* codes = nullptr;
  float* scales = nullptr;
  const float* static_scale = nullptr;
  // Nothing reads the 16-bit output (the consumer takes only the codes): the kernels that hold the
  // row in registers do not write it; the others still do.
  bool values_unused = false;
  // Codes, and exactly one of per-row or static scales.
  bool complete() const { return codes != nullptr && (scales == nullptr) != (static_scale == nullptr); }
};

// x [m, k] of `dtype` (bf16/fp16/f32), q [m, k] E4M3. k % 16 == 0 and 16-byte aligned x / q.
absl::Status LaunchQuantizeFp8(DType dtype, const void* x, void* q, float* scales, int64_t m, int64_t k,
                               Fp8ActivationScaling scaling, const float* static_scale, Stream stream,
                               bool pdl = false);

}  // namespace llm::cuda
