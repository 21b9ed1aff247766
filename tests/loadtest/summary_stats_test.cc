#include "server/loadtest/summary_stats.h"

#include <random>

#include "gtest/gtest.h"

namespace llm::loadtest {
namespace {

TEST(SummaryStatsTest, InterpolatesBetweenRanks) {
  std::vector<double> v = {4, 1, 3, 2, 5};  // sorted: 1..5
  const Summary s = Summarize(v);
  EXPECT_EQ(s.count, 5);
  EXPECT_DOUBLE_EQ(s.mean, 3);
  EXPECT_DOUBLE_EQ(s.min, 1);
  EXPECT_DOUBLE_EQ(s.p50, 3);
  EXPECT_DOUBLE_EQ(s.p90, 4.6);   // rank 3.6
  EXPECT_DOUBLE_EQ(s.p99, 4.96);  // rank 3.96
  EXPECT_DOUBLE_EQ(s.max, 5);
}

TEST(SummaryStatsTest, EmptyAndSingle) {
  std::vector<double> none;
  EXPECT_EQ(Summarize(none).count, 0);
  EXPECT_EQ(Summarize(none).p99, 0);
  std::vector<double> one = {7.5};
  const Summary s = Summarize(one);
  EXPECT_EQ(s.p50, 7.5);
  EXPECT_EQ(s.p99, 7.5);
  EXPECT_EQ(s.max, 7.5);
}

TEST(SummaryStatsTest, PercentilesAreOrderedOnRandomData) {
  std::mt19937_64 rng(3);
  std::lognormal_distribution<double> d(0, 2);
  for (int n : {2, 3, 10, 101, 1000}) {
    std::vector<double> v(n);
    for (double& x : v) x = d(rng);
    const Summary s = Summarize(v);
    EXPECT_LE(s.min, s.p50);
    EXPECT_LE(s.p50, s.p90);
    EXPECT_LE(s.p90, s.p99);
    EXPECT_LE(s.p99, s.max);
    EXPECT_LE(s.min, s.mean);
    EXPECT_LE(s.mean, s.max);
  }
}

}  // namespace
}  // namespace llm::loadtest
