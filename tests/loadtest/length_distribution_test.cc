#include "server/loadtest/length_distribution.h"

#include "gtest/gtest.h"

namespace llm::loadtest {
namespace {

TEST(LengthDistributionTest, ParsesEachKind) {
  EXPECT_EQ(LengthDistribution::Parse("128")->kind(), LengthDistribution::Kind::kFixed);
  EXPECT_EQ(LengthDistribution::Parse("uniform:1:10")->kind(), LengthDistribution::Kind::kUniform);
  EXPECT_EQ(LengthDistribution::Parse("normal:100:10")->kind(), LengthDistribution::Kind::kNormal);
  EXPECT_EQ(LengthDistribution::Parse("lognormal:200:1")->kind(), LengthDistribution::Kind::kLogNormal);
  EXPECT_EQ(LengthDistribution::Parse("lognormal:200:1:1000")->Max(), 1000);
  EXPECT_EQ(LengthDistribution::Parse("uniform:3:9")->ToString(), "uniform:3:9");
}

TEST(LengthDistributionTest, RejectsBadValues) {
  for (const char* bad : {"", "0", "-3", "abc", "uniform:5", "uniform:9:3", "uniform:0:3", "uniform:1.5:3",
                          "normal:0:1", "normal:10:-1", "lognormal:10", "poisson:3:4", "uniform:a:b"})
    EXPECT_FALSE(LengthDistribution::Parse(bad).ok()) << bad;
}

TEST(LengthDistributionTest, SamplesStayInRangeWithTheRightMean) {
  std::mt19937_64 rng(1);
  for (const char* spec : {"64", "uniform:10:30", "normal:200:50", "lognormal:100:0.8:800"}) {
    const LengthDistribution d = *LengthDistribution::Parse(spec);
    double sum = 0;
    const int n = 20000;
    for (int i = 0; i < n; ++i) {
      const int64_t x = d.Sample(rng);
      ASSERT_GE(x, 1) << spec;
      ASSERT_LE(x, d.Max()) << spec;
      sum += static_cast<double>(x);
    }
    EXPECT_NEAR(sum / n, d.Mean(), d.Mean() * 0.03) << spec;
  }
}

}  // namespace
}  // namespace llm::loadtest
