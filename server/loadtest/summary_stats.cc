#include "server/loadtest/summary_stats.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "nlohmann/json.hpp"

namespace llm::loadtest {

double Percentile(const std::vector<double>& sorted, double q) {
  if (sorted.empty()) return 0;
  const double rank = std::clamp(q, 0.0, 100.0) / 100.0 * static_cast<double>(sorted.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(rank));
  const size_t hi = std::min(lo + 1, sorted.size() - 1);
  const double frac = rank - static_cast<double>(lo);
  // Clamped: a + (b - a) * f can round past b.
  return std::clamp(sorted[lo] + (sorted[hi] - sorted[lo]) * frac, sorted[lo], sorted[hi]);
}

Summary Summarize(std::vector<double>& values) {
  Summary s;
  if (values.empty()) return s;
  std::sort(values.begin(), values.end());
  s.count = static_cast<int64_t>(values.size());
  s.mean = std::accumulate(values.begin(), values.end(), 0.0) / static_cast<double>(values.size());
  s.min = values.front();
  s.p50 = Percentile(values, 50);
  s.p90 = Percentile(values, 90);
  s.p99 = Percentile(values, 99);
  s.max = values.back();
  return s;
}

nlohmann::ordered_json ToJson(const Summary& s) {
  return {{"count", s.count}, {"mean", s.mean}, {"min", s.min}, {"p50", s.p50},
          {"p90", s.p90},     {"p99", s.p99},   {"max", s.max}};
}

}  // namespace llm::loadtest
