#include "kernels/core/dtype.h"

#include <cmath>
#include <limits>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace llm {

std::string_view DTypeName(DType t) {
  switch (t) {
    case DType::kF32: return "float32";
    case DType::kF16: return "float16";
    case DType::kBF16: return "bfloat16";
    case DType::kI32: return "int32";
    case DType::kI64: return "int64";
    case DType::kU8: return "uint8";
    case DType::kF8E4M3: return "float8_e4m3fn";
    case DType::kU4: return "uint4";
  }
  return "unknown";
}

absl::StatusOr<DType> ParseDType(std::string_view name) {
  std::string n = absl::AsciiStrToLower(std::string(name));
  if (n == "bf16" || n == "bfloat16") return DType::kBF16;
  if (n == "fp16" || n == "float16" || n == "half" || n == "f16") return DType::kF16;
  if (n == "fp32" || n == "float32" || n == "float" || n == "f32") return DType::kF32;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown dtype '", std::string(name), "' (expected bf16, fp16 or fp32)"));
}

float Fp16ToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: normalize
      exp = 127 - 15 + 1;
      while ((mant & 0x400u) == 0) {
        mant <<= 1;
        --exp;
      }
      mant &= 0x3ffu;
      bits = sign | (exp << 23) | (mant << 13);
    }
  } else if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t FloatToFp16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t abs = bits & 0x7fffffffu;
  if (abs > 0x7f800000u) return sign | 0x7e00u;   // NaN
  if (abs >= 0x477ff000u) return sign | 0x7c00u;  // overflow (incl. rounding up) -> inf
  if (abs < 0x38800000u) {                        // subnormal or zero in half
    if (abs < 0x33000000u) return sign;           // rounds to zero
    const uint32_t exp = abs >> 23;
    const uint32_t mant = (abs & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126 - exp;  // 14 + (113 - exp) - ... : aligns to 2^-24 units
    uint32_t half_mant = mant >> (shift);
    const uint32_t rem = mant & ((1u << shift) - 1);
    const uint32_t halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (half_mant & 1u))) ++half_mant;
    return sign | static_cast<uint16_t>(half_mant);
  }
  uint32_t v = abs - (112u << 23);  // rebias exponent 127 -> 15
  const uint32_t rem = v & 0x1fffu;
  uint32_t h = v >> 13;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;
  return sign | static_cast<uint16_t>(h);
}

namespace {

// Every E4M3 byte's value: the decoder is a table lookup.
struct Fp8Table {
  float value[256];
  Fp8Table() {
    for (int b = 0; b < 256; ++b) {
      const int exp = (b >> 3) & 0xf, mant = b & 7;
      float v;
      if (exp == 0xf && mant == 7) v = std::numeric_limits<float>::quiet_NaN();
      else if (exp == 0) v = std::ldexp(static_cast<float>(mant), -9);  // subnormal: mant * 2^-9
      else v = std::ldexp(1.0f + mant / 8.0f, exp - 7);
      value[b] = (b & 0x80) ? -v : v;
    }
  }
};
const Fp8Table kFp8Table;

}  // namespace

float Fp8E4M3ToFloat(uint8_t v) { return kFp8Table.value[v]; }

uint8_t FloatToFp8E4M3(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  const uint8_t sign = static_cast<uint8_t>((bits >> 24) & 0x80u);
  const uint32_t abs_bits = bits & 0x7fffffffu;
  if (abs_bits > 0x7f800000u) return 0x7f;  // NaN
  float a;
  std::memcpy(&a, &abs_bits, 4);
  if (a >= kFp8E4M3Max) return sign | 0x7e;  // saturate (infinity included)
  if (a < 0.015625f) {  // below the smallest normal 2^-6: multiples of 2^-9, 8 of them rounding up to 2^-6
    // a * 512 is exact; nearbyint rounds to nearest even. Byte 8 (q = 8) is exactly 2^-6.
    const uint32_t q = static_cast<uint32_t>(std::nearbyint(a * 512.0f));
    return sign | static_cast<uint8_t>(q);
  }
  int32_t exp = static_cast<int32_t>(abs_bits >> 23) - 127 + 7;  // 1..8+7
  uint32_t mant = (abs_bits & 0x7fffffu) >> 20;
  const uint32_t rem = abs_bits & 0xfffffu, half = 0x80000u;
  if (rem > half || (rem == half && (mant & 1u))) ++mant;
  if (mant == 8) {
    mant = 0;
    ++exp;
  }
  if (exp > 15 || (exp == 15 && mant == 7)) return sign | 0x7e;  // rounded past 448
  return sign | static_cast<uint8_t>((exp << 3) | mant);
}

void ConvertToFloat(DType src_type, const void* src, float* dst, size_t count) {
  switch (src_type) {
    case DType::kF32:
      std::memcpy(dst, src, count * 4);
      return;
    case DType::kBF16: {
      const uint16_t* s = static_cast<const uint16_t*>(src);
      for (size_t i = 0; i < count; ++i) dst[i] = Bf16ToFloat(s[i]);
      return;
    }
    case DType::kF16: {
      const uint16_t* s = static_cast<const uint16_t*>(src);
      for (size_t i = 0; i < count; ++i) dst[i] = Fp16ToFloat(s[i]);
      return;
    }
    case DType::kF8E4M3: {
      const uint8_t* s = static_cast<const uint8_t*>(src);
      for (size_t i = 0; i < count; ++i) dst[i] = kFp8Table.value[s[i]];
      return;
    }
    default:
      break;
  }
  std::abort();
}

void ConvertFromFloat(const float* src, DType dst_type, void* dst, size_t count) {
  switch (dst_type) {
    case DType::kF32:
      std::memcpy(dst, src, count * 4);
      return;
    case DType::kBF16: {
      uint16_t* d = static_cast<uint16_t*>(dst);
      for (size_t i = 0; i < count; ++i) d[i] = FloatToBf16(src[i]);
      return;
    }
    case DType::kF16: {
      uint16_t* d = static_cast<uint16_t*>(dst);
      for (size_t i = 0; i < count; ++i) d[i] = FloatToFp16(src[i]);
      return;
    }
    case DType::kF8E4M3: {
      uint8_t* d = static_cast<uint8_t*>(dst);
      for (size_t i = 0; i < count; ++i) d[i] = FloatToFp8E4M3(src[i]);
      return;
    }
    default:
      break;
  }
  std::abort();
}

}  // namespace llm
