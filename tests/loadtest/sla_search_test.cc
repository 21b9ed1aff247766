#include "server/loadtest/sla_search.h"

#include "gtest/gtest.h"

namespace llm::loadtest {
namespace {

// A server that meets the SLA up to `capacity` requests/s.
ProbeFn Threshold(double capacity, int* probes) {
  return [=](double rate) -> absl::StatusOr<ProbeOutcome> {
    ++*probes;
    ProbeOutcome o;
    o.passed = rate <= capacity;
    o.why = o.passed ? "" : "too slow";
    o.run_index = *probes - 1;
    return o;
  };
}

TEST(SlaSearchTest, BracketsUpThenBisects) {
  int probes = 0;
  SlaSearchOptions options;
  options.start_rate = 1;
  options.rel_tolerance = 0.02;
  options.max_probes = 30;
  const auto r = SearchMaxRate(options, Threshold(37.3, &probes));
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->found);
  EXPECT_LE(r->best_rate, 37.3);
  EXPECT_GT(r->best_rate, 37.3 / 1.02);
  EXPECT_GT(r->lowest_failing_rate, 37.3);
  EXPECT_LE(r->lowest_failing_rate - r->best_rate, 0.02 * r->best_rate);
  EXPECT_EQ(r->probes[r->best_run_index].rate, r->best_rate);
  EXPECT_EQ(static_cast<int>(r->probes.size()), probes);
  // Bracket 1, 2, ..., 64 (7 probes); bisect 48, 40, 36, 38, 37, 37.5 until within 2% of 37.
  EXPECT_EQ(probes, 13);
  EXPECT_EQ(r->stopped_by, "converged");
}

TEST(SlaSearchTest, BracketsDownWhenTheStartFails) {
  int probes = 0;
  SlaSearchOptions options;
  options.start_rate = 100;
  options.rel_tolerance = 0.05;
  const auto r = SearchMaxRate(options, Threshold(3, &probes));
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->found);
  EXPECT_LE(r->best_rate, 3);
  EXPECT_GT(r->best_rate, 3 / 1.05);
}

TEST(SlaSearchTest, ReportsWhenNothingPasses) {
  int probes = 0;
  SlaSearchOptions options;
  options.start_rate = 1;
  options.min_rate = 0.25;
  const auto r = SearchMaxRate(options, Threshold(0.1, &probes));
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->found);
  EXPECT_EQ(r->best_run_index, -1);
  EXPECT_EQ(r->probes.back().rate, 0.25);
  EXPECT_EQ(probes, 3);  // 1, 0.5, 0.25
  EXPECT_EQ(r->stopped_by, "min rate");
}

TEST(SlaSearchTest, StopsAtTheMaximumRate) {
  int probes = 0;
  SlaSearchOptions options;
  options.start_rate = 10;
  options.max_rate = 50;
  const auto r = SearchMaxRate(options, Threshold(1e9, &probes));
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->found);
  EXPECT_EQ(r->best_rate, 50);
  EXPECT_EQ(r->lowest_failing_rate, 0);
  EXPECT_EQ(probes, 4);  // 10, 20, 40, 50
  EXPECT_EQ(r->stopped_by, "max rate");
}

TEST(SlaSearchTest, RespectsTheProbeBudgetAndErrors) {
  int probes = 0;
  SlaSearchOptions options;
  options.max_probes = 3;
  const auto r = SearchMaxRate(options, Threshold(1000, &probes));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(probes, 3);
  EXPECT_EQ(r->best_rate, 4);
  EXPECT_EQ(r->stopped_by, "probe budget");

  const auto failing = SearchMaxRate(
      options, [](double) -> absl::StatusOr<ProbeOutcome> { return absl::UnavailableError("server gone"); });
  EXPECT_EQ(failing.status().code(), absl::StatusCode::kUnavailable);
  options.rel_tolerance = 0;
  EXPECT_FALSE(SearchMaxRate(options, Threshold(1, &probes)).ok());
}

}  // namespace
}  // namespace llm::loadtest
