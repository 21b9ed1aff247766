// Summary statistics of one latency metric over a run: count, mean, percentiles and max.
#pragma once

#include <cstdint>
#include <vector>

#include "nlohmann/json_fwd.hpp"

namespace llm::loadtest {

struct Summary {
  int64_t count = 0;
  double mean = 0;
  double min = 0;
  double p50 = 0;
  double p90 = 0;
  double p99 = 0;
  double max = 0;
};

// Percentile q in [0, 100] of sorted `values`, interpolating linearly between the two closest
// ranks (numpy's default), so P50 <= P90 <= P99 <= max always holds. 0 when empty.
double Percentile(const std::vector<double>& sorted, double q);

// Sorts `values` in place and summarizes them.
Summary Summarize(std::vector<double>& values);

nlohmann::ordered_json ToJson(const Summary& s);

}  // namespace llm::loadtest
