#include "kernels/core/dtype.h"

#include <cmath>
#include <random>

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

}  // namespace
}  // namespace llm
