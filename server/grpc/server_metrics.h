// The server's Prometheus metrics. Request outcomes and latencies are recorded as outputs arrive
// (on the engine thread: lock-free), engine gauges (running, waiting, KV cache, preemptions,
// tokens) are read from EngineStats when the page is rendered.
#pragma once

#include <array>
#include <atomic>
#include <deque>
#include <mutex>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "engine/engine.h"
#include "engine/core/histogram.h"

namespace llm::server {

class ServerMetrics {
 public:
  ServerMetrics();

  // A request ended (`last` is its final update): counted by finish reason; its latencies and
  // lengths go to the histograms.
  void RecordFinished(const RequestOutput& last);
  // `tokens` arrived `gap` after the request's previous ones; each counts as gap / tokens.
  void RecordTokenGap(absl::Duration gap, int tokens);
  // A request was refused before it reached the engine's queue (bad input, queue full, draining).
  void RecordRejected(absl::StatusCode code);

  // The text exposition format, every sample labelled model_name="<model_name>" (no label while
  // the model loads). `stats`/`info` are absent while the model loads. `steps` (may be null): the
  // engine's per-step distributions.
  std::string Render(const std::string& model_name, const std::optional<EngineStats>& stats,
                     const EngineInfo* info, const EngineStepMetrics* steps = nullptr) const;

 private:
  // Generated tokens per second over the last minute (since start for the first scrape).
  double TokensPerSecond(uint64_t generated_tokens) const;

  static constexpr int kNumReasons = static_cast<int>(FinishReason::kError) + 1;
  static constexpr int kNumCodes = static_cast<int>(absl::StatusCode::kUnauthenticated) + 1;
  std::array<std::atomic<uint64_t>, kNumReasons> finished_{};
  std::array<std::atomic<uint64_t>, kNumCodes> rejected_{};
  Histogram time_to_first_token_;
  Histogram inter_token_;
  Histogram end_to_end_;
  Histogram queue_time_;
  Histogram prefill_time_;
  Histogram decode_time_;
  Histogram prompt_tokens_;
  Histogram generation_tokens_;

  struct TokenSample {
    absl::Time time;
    uint64_t tokens;
  };
  mutable std::mutex rate_mu_;
  mutable std::deque<TokenSample> token_samples_;
};

// Follows one request's outputs and records them into ServerMetrics: the gaps between its
// updates, then its outcome. Owned by the request's reactor; called on the engine thread.
class RequestMetricsRecorder {
 public:
  explicit RequestMetricsRecorder(ServerMetrics& metrics) : metrics_(metrics) {}
  void OnOutput(const RequestOutput& output);

 private:
  ServerMetrics& metrics_;
  absl::Time last_tokens_ = absl::InfinitePast();
};

}  // namespace llm::server
