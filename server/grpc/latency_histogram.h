// A Prometheus histogram of durations in seconds with fixed bucket bounds. Observe() is lock-free
// (it runs on the engine thread, which must never wait); Render() writes the text exposition
// format (`_bucket{le=...}` cumulative counts, `_sum`, `_count`).
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace llm::server {

class LatencyHistogram {
 public:
  // `bounds`: increasing upper bounds in seconds; a +Inf bucket is implied.
  explicit LatencyHistogram(std::vector<double> bounds);

  void Observe(double seconds);
  void Render(std::string_view name, std::string_view help, std::string* out) const;
  uint64_t count() const { return count_.load(std::memory_order_relaxed); }

  // 1 ms .. 60 s, roughly three buckets per decade: fits TTFT, end-to-end and queue time.
  static std::vector<double> RequestLatencyBounds();
  // 0.5 ms .. 5 s: fits the time between two tokens of one request.
  static std::vector<double> TokenLatencyBounds();

 private:
  std::vector<double> bounds_;
  std::unique_ptr<std::atomic<uint64_t>[]> buckets_;  // bounds_.size() + 1, not cumulative
  std::atomic<uint64_t> count_{0};
  std::atomic<double> sum_{0.0};
};

}  // namespace llm::server
