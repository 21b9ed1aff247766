// Element types and host-side conversions between them. Kernels dispatch on DType once per launch.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

#include "absl/status/statusor.h"

namespace llm {

// kF8E4M3: OCP FP8 E4M3 ("e4m3fn": no infinities, one NaN pattern, largest finite 448), the
// element type of FP8 checkpoints' weights and of an FP8 KV cache. It is a storage type only:
// nothing computes in it without a scale (see engine/core/storage_format.h).
// kU4: unsigned 4-bit codes, the element of packed int4 (W4A16) weights. Sub-byte, so no tensor
// has it as its dtype: a storage format declares it, and the tensor holding the codes is kU8,
// two codes a byte (see engine/core/storage_format.h). DTypeSize gives 0.
enum class DType : uint8_t { kF32, kF16, kBF16, kI32, kI64, kU8, kF8E4M3, kU4 };

constexpr size_t DTypeSize(DType t) {
  switch (t) {
    case DType::kF32: return 4;
    case DType::kF16: return 2;
    case DType::kBF16: return 2;
    case DType::kI32: return 4;
    case DType::kI64: return 8;
    case DType::kU8: return 1;
    case DType::kF8E4M3: return 1;
    case DType::kU4: return 0;
  }
  return 0;
}

std::string_view DTypeName(DType t);
// Parses "bf16"/"bfloat16", "fp16"/"float16"/"half", "fp32"/"float32"/"float".
absl::StatusOr<DType> ParseDType(std::string_view name);

// IEEE binary16 / bfloat16 <-> float on the host, round-to-nearest-even, NaN-preserving.
inline float Bf16ToFloat(uint16_t h) {
  uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}
inline uint16_t FloatToBf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40);  // quiet NaN
  uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}
float Fp16ToFloat(uint16_t h);
uint16_t FloatToFp16(float f);

// FP8 E4M3 <-> float on the host. The encoder rounds to nearest even and saturates finite
// values and infinities to +-448 (CUDA's __NV_SATFINITE), so the CPU oracle and the GPU kernels
// quantize alike; NaN stays NaN (0x7f).
inline constexpr float kFp8E4M3Max = 448.0f;
float Fp8E4M3ToFloat(uint8_t v);
uint8_t FloatToFp8E4M3(float f);

// Converts `count` elements of a floating type (f32/f16/bf16/f8e4m3) to float32.
void ConvertToFloat(DType src_type, const void* src, float* dst, size_t count);
// Converts float32 to a floating type (f32/f16/bf16/f8e4m3, the last saturating).
void ConvertFromFloat(const float* src, DType dst_type, void* dst, size_t count);

}  // namespace llm
