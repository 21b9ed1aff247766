// A Prometheus histogram with fixed bucket bounds (durations in seconds, or counts). Observe() is
// lock-free (the engine and output threads must never wait on a scrape); Render() writes the text
// exposition format (`_bucket{le=...}` cumulative counts, `_sum`, `_count`).
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace llm {

class Histogram {
 public:
  // `bounds`: increasing upper bounds in seconds; a +Inf bucket is implied.
  explicit Histogram(std::vector<double> bounds);

  void Observe(double value);
  // `labels`: extra labels for every sample, e.g. `model_name="llama"` (empty: none).
  void Render(std::string_view name, std::string_view help, std::string* out, std::string_view labels = "") const;
  uint64_t count() const { return count_.load(std::memory_order_relaxed); }
  double sum() const { return sum_.load(std::memory_order_relaxed); }

  // 1 ms .. 60 s, roughly three buckets per decade: fits TTFT, end-to-end and queue time.
  static std::vector<double> RequestLatencyBounds();
  // 0.5 ms .. 5 s: fits the time between two tokens of one request.
  static std::vector<double> TokenLatencyBounds();
  // 10 us .. 2.5 s: fits the phases of one engine step.
  static std::vector<double> StepPhaseBounds();
  // 1, 2, 4, ... 16384: fits sequences and tokens per step.
  static std::vector<double> PowersOfTwoBounds();
  // 1, 2, 5, 10, 20, 50, ... 1e6 tokens: prompt and generation lengths of requests.
  static std::vector<double> TokenCountBounds();

 private:
  std::vector<double> bounds_;
  std::unique_ptr<std::atomic<uint64_t>[]> buckets_;  // bounds_.size() + 1, not cumulative
  std::atomic<uint64_t> count_{0};
  std::atomic<double> sum_{0.0};
};

}  // namespace llm
