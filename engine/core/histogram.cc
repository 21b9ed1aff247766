#include "engine/core/histogram.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace llm {

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), buckets_(new std::atomic<uint64_t>[bounds_.size() + 1]) {
  for (size_t i = 0; i <= bounds_.size(); ++i) buckets_[i].store(0, std::memory_order_relaxed);
}

void Histogram::Observe(double value) {
  const size_t bucket = std::lower_bound(bounds_.begin(), bounds_.end(), value) - bounds_.begin();
  buckets_[bucket].fetch_add(1, std::memory_order_relaxed);
  sum_.fetch_add(value, std::memory_order_relaxed);
  count_.fetch_add(1, std::memory_order_relaxed);
}

void Histogram::Render(std::string_view name, std::string_view help, std::string* out,
                       std::string_view labels) const {
  const std::string n(name);
  const std::string bucket_prefix = labels.empty() ? "{le=\"" : absl::StrCat("{", std::string(labels), ",le=\"");
  const std::string plain = labels.empty() ? "" : absl::StrCat("{", std::string(labels), "}");
  absl::StrAppend(out, "# HELP ", n, " ", std::string(help), "\n# TYPE ", n, " histogram\n");
  uint64_t cumulative = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cumulative += buckets_[i].load(std::memory_order_relaxed);
    absl::StrAppend(out, n, "_bucket", bucket_prefix, bounds_[i], "\"} ", cumulative, "\n");
  }
  cumulative += buckets_[bounds_.size()].load(std::memory_order_relaxed);
  absl::StrAppend(out, n, "_bucket", bucket_prefix, "+Inf\"} ", cumulative, "\n");
  absl::StrAppend(out, n, "_sum", plain, " ", sum_.load(std::memory_order_relaxed), "\n");
  absl::StrAppend(out, n, "_count", plain, " ", cumulative, "\n");
}

std::vector<double> Histogram::RequestLatencyBounds() {
  return {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};
}

std::vector<double> Histogram::TokenLatencyBounds() {
  return {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5};
}

std::vector<double> Histogram::StepPhaseBounds() {
  return {1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5};
}

std::vector<double> Histogram::TokenCountBounds() {
  std::vector<double> b;
  for (double decade = 1; decade <= 1e6; decade *= 10)
    for (double m : {1.0, 2.0, 5.0})
      if (m * decade <= 1e6) b.push_back(m * decade);
  return b;
}

std::vector<double> Histogram::PowersOfTwoBounds() {
  std::vector<double> b;
  for (double v = 1; v <= 16384; v *= 2) b.push_back(v);
  return b;
}

}  // namespace llm
