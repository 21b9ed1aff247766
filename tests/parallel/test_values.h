// Test values for collectives: what rank r contributes at index i (exactly representable in
// the dtype), host encoding to and from raw bytes, and per-dtype tolerances, so references are
// computed in double precision from the very values every rank sent.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "kernels/core/dtype.h"

namespace llm::testing {

inline bool IsFloat(DType t) { return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16; }

// The value rank `r` contributes at index i, already representable in `t`.
inline double Value(DType t, int r, size_t i) {
  if (IsFloat(t)) {
    const double v = (r + 1) * 0.371 + static_cast<double>(i % 97) * 0.0113 - 0.5;
    float f = static_cast<float>(v);
    if (t == DType::kF16) f = Fp16ToFloat(FloatToFp16(f));
    if (t == DType::kBF16) f = Bf16ToFloat(FloatToBf16(f));
    return f;
  }
  if (t == DType::kI64) return static_cast<double>((int64_t{r} << 33) + static_cast<int64_t>(i));
  return static_cast<double>(r * 100000 + static_cast<int>(i % 50000) - 7);
}

inline std::vector<uint8_t> Encode(DType t, const std::vector<double>& values) {
  std::vector<uint8_t> bytes(values.size() * DTypeSize(t));
  for (size_t i = 0; i < values.size(); ++i) {
    uint8_t* p = bytes.data() + i * DTypeSize(t);
    const double v = values[i];
    switch (t) {
      case DType::kF32: {
        const float f = static_cast<float>(v);
        std::memcpy(p, &f, 4);
        break;
      }
      case DType::kF16: {
        const uint16_t h = FloatToFp16(static_cast<float>(v));
        std::memcpy(p, &h, 2);
        break;
      }
      case DType::kBF16: {
        const uint16_t h = FloatToBf16(static_cast<float>(v));
        std::memcpy(p, &h, 2);
        break;
      }
      case DType::kI32: {
        const int32_t x = static_cast<int32_t>(v);
        std::memcpy(p, &x, 4);
        break;
      }
      case DType::kI64: {
        const int64_t x = static_cast<int64_t>(v);
        std::memcpy(p, &x, 8);
        break;
      }
      case DType::kU8: {
        const uint8_t x = static_cast<uint8_t>(v);
        *p = x;
        break;
      }
      case DType::kF8E4M3:  // storage formats of weights and caches: collectives never carry them
      case DType::kU4:
        std::abort();
    }
  }
  return bytes;
}

inline std::vector<double> Decode(DType t, const std::vector<uint8_t>& bytes) {
  const size_t n = bytes.size() / DTypeSize(t);
  std::vector<double> values(n);
  for (size_t i = 0; i < n; ++i) {
    const uint8_t* p = bytes.data() + i * DTypeSize(t);
    switch (t) {
      case DType::kF32: {
        float f;
        std::memcpy(&f, p, 4);
        values[i] = f;
        break;
      }
      case DType::kF16: {
        uint16_t h;
        std::memcpy(&h, p, 2);
        values[i] = Fp16ToFloat(h);
        break;
      }
      case DType::kBF16: {
        uint16_t h;
        std::memcpy(&h, p, 2);
        values[i] = Bf16ToFloat(h);
        break;
      }
      case DType::kI32: {
        int32_t x;
        std::memcpy(&x, p, 4);
        values[i] = x;
        break;
      }
      case DType::kI64: {
        int64_t x;
        std::memcpy(&x, p, 8);
        values[i] = static_cast<double>(x);
        break;
      }
      case DType::kU8:
        values[i] = *p;
        break;
      case DType::kF8E4M3:  // never carried by collectives (Encode)
      case DType::kU4:
        std::abort();
    }
  }
  return values;
}

inline std::vector<double> RankValues(DType t, int r, size_t count) {
  std::vector<double> v(count);
  for (size_t i = 0; i < count; ++i) v[i] = Value(t, r, i);
  return v;
}

// Tolerance of one result: the sum is rounded once into `t` (f16/bf16 reduce in f32).
inline double Tolerance(DType t, double ref) {
  switch (t) {
    case DType::kF32:
      return 1e-5 * std::abs(ref) + 1e-6;
    case DType::kF16:
      return std::ldexp(1.0, -10) * std::abs(ref) + 1e-4;
    case DType::kBF16:
      return std::ldexp(1.0, -7) * std::abs(ref) + 1e-3;
    default:
      return 0;
  }
}

}  // namespace llm::testing
