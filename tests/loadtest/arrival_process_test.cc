#include "server/loadtest/arrival_process.h"

#include <cmath>
#include <limits>

#include "gtest/gtest.h"

namespace llm::loadtest {
namespace {

struct Moments {
  double mean_s, cv;
};

Moments GapMoments(double rate, double burstiness, int n) {
  ArrivalProcess arrivals(rate, burstiness, /*seed=*/11);
  double sum = 0, sum2 = 0;
  for (int i = 0; i < n; ++i) {
    const double g = absl::ToDoubleSeconds(arrivals.NextGap());
    sum += g;
    sum2 += g * g;
  }
  const double mean = sum / n;
  return {mean, std::sqrt(sum2 / n - mean * mean) / mean};
}

TEST(ArrivalProcessTest, PoissonGapsAreExponential) {
  const Moments m = GapMoments(50, 1, 100000);
  EXPECT_NEAR(m.mean_s, 1.0 / 50, 0.02 / 50);
  EXPECT_NEAR(m.cv, 1.0, 0.02);
}

TEST(ArrivalProcessTest, BurstinessSetsTheVariation) {
  for (double b : {0.25, 0.5, 4.0}) {
    const Moments m = GapMoments(10, b, 200000);
    EXPECT_NEAR(m.mean_s, 0.1, 0.004) << b;
    EXPECT_NEAR(m.cv, 1 / std::sqrt(b), 0.05 / std::sqrt(b)) << b;
  }
}

TEST(ArrivalProcessTest, InfiniteRateSendsAtOnce) {
  ArrivalProcess arrivals(std::numeric_limits<double>::infinity(), 1, 1);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(arrivals.NextGap(), absl::ZeroDuration());
}

}  // namespace
}  // namespace llm::loadtest
