#include "kernels/core/dtype.h"

#include <cmath>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace llm {
namespace {

// Reference: the compiler's own IEEE binary16 type.
TEST(DTypeTest, Fp16RoundTripsEveryHalfValue) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const uint16_t bits = static_cast<uint16_t>(h);
    _Float16 ref;
    std::memcpy(&ref, &bits, 2);
    const float f = Fp16ToFloat(bits);
    if (std::isnan(static_cast<float>(ref))) {
      EXPECT_TRUE(std::isnan(f));
      continue;
    }
    EXPECT_EQ(f, static_cast<float>(ref)) << std::hex << h;
    EXPECT_EQ(FloatToFp16(f), bits) << std::hex << h;
  }
}

TEST(DTypeTest, FloatToFp16RoundsLikeTheCompiler) {
  std::mt19937 rng(1);
  std::uniform_int_distribution<uint32_t> bits_dist;
  for (int i = 0; i < 2000000; ++i) {
    uint32_t bits = bits_dist(rng);
    float f;
    std::memcpy(&f, &bits, 4);
    if (std::isnan(f)) continue;
    const _Float16 ref = static_cast<_Float16>(f);
    uint16_t ref_bits;
    std::memcpy(&ref_bits, &ref, 2);
    ASSERT_EQ(FloatToFp16(f), ref_bits) << f;
  }
}

TEST(DTypeTest, Bf16RoundsToNearestEven) {
  EXPECT_EQ(FloatToBf16(1.0f), 0x3f80);
  // 1 + 2^-8 is exactly halfway between two bf16 values: ties to even (down).
  EXPECT_EQ(FloatToBf16(1.00390625f), 0x3f80);
  // 1 + 3*2^-8 is halfway, ties to even (up).
  EXPECT_EQ(FloatToBf16(1.01171875f), 0x3f82);
  EXPECT_EQ(Bf16ToFloat(0x3f82), 1.015625f);
  EXPECT_TRUE(std::isnan(Bf16ToFloat(FloatToBf16(std::nanf("")))));
}

TEST(DTypeTest, ParseDType) {
  EXPECT_EQ(*ParseDType("bf16"), DType::kBF16);
  EXPECT_EQ(*ParseDType("float16"), DType::kF16);
  EXPECT_EQ(*ParseDType("FP32"), DType::kF32);
  EXPECT_FALSE(ParseDType("int4").ok());
}


// FP8 E4M3 ("fn"): every byte decodes to its value and encodes back; the encoder picks the nearest
// representable value (ties to the even mantissa), checked against a brute-force search over
// all 254 finite values, and saturates at +-448 like CUDA's __NV_SATFINITE.
TEST(DTypeTest, Fp8E4M3RoundTripsEveryByte) {
  EXPECT_EQ(Fp8E4M3ToFloat(0x7e), 448.0f);
  EXPECT_EQ(Fp8E4M3ToFloat(0xfe), -448.0f);
  EXPECT_EQ(Fp8E4M3ToFloat(0x01), std::ldexp(1.0f, -9));  // smallest subnormal
  EXPECT_EQ(Fp8E4M3ToFloat(0x08), std::ldexp(1.0f, -6));  // smallest normal
  EXPECT_EQ(Fp8E4M3ToFloat(0x38), 1.0f);
  EXPECT_TRUE(std::isnan(Fp8E4M3ToFloat(0x7f)));
  EXPECT_TRUE(std::isnan(Fp8E4M3ToFloat(0xff)));
  for (int b = 0; b < 256; ++b) {
    if ((b & 0x7f) == 0x7f) continue;
    const float f = Fp8E4M3ToFloat(static_cast<uint8_t>(b));
    if (b == 0x80) {  // -0
      EXPECT_EQ(FloatToFp8E4M3(f), 0x80);
      continue;
    }
    EXPECT_EQ(FloatToFp8E4M3(f), b) << b;
  }
}

TEST(DTypeTest, Fp8E4M3RoundsToNearestEvenAndSaturates) {
  std::vector<float> finite;
  for (int b = 0; b < 0x7f; ++b) finite.push_back(Fp8E4M3ToFloat(static_cast<uint8_t>(b)));
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> exponent(-12.0f, 9.5f);
  for (int i = 0; i < 200000; ++i) {
    const float a = std::exp2(exponent(rng));
    // Brute force: the nearest of the non-negative values, ties to the even byte.
    int best = 0;
    for (int b = 1; b < 0x7f; ++b) {
      const float d = std::abs(finite[b] - a), db = std::abs(finite[best] - a);
      if (d < db || (d == db && (b & 1) == 0)) best = b;
    }
    if (a >= 448.0f) best = 0x7e;
    ASSERT_EQ(FloatToFp8E4M3(a), best) << a;
    ASSERT_EQ(FloatToFp8E4M3(-a), best | 0x80) << -a;
  }
  EXPECT_EQ(FloatToFp8E4M3(1e9f), 0x7e);
  EXPECT_EQ(FloatToFp8E4M3(-INFINITY), 0xfe);
  EXPECT_EQ(FloatToFp8E4M3(std::nanf("")), 0x7f);
  // Halfway between 1 and 1.125 (mantissa 0 and 1): to the even mantissa 0; 1.1875 goes up to 1.25.
  EXPECT_EQ(FloatToFp8E4M3(1.0625f), 0x38);
  EXPECT_EQ(FloatToFp8E4M3(1.1875f), 0x3a);
}

}  // namespace
}  // namespace llm
