// SlaLimits: latency limits a load level must meet, on the run's P99s (and an error budget).
// Presets are MLPerf Inference's server-scenario limits for Llama-2-70B.
#pragma once

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "nlohmann/json_fwd.hpp"

namespace llm::loadtest {

struct RunReport;
struct RequestRecord;

struct SlaLimits {
  std::optional<double> ttft_p99_ms;
  std::optional<double> tpot_p99_ms;
  std::optional<double> itl_p99_ms;
  std::optional<double> e2e_p99_ms;
  double max_error_rate = 0;  // failed / sent

  bool any() const { return ttft_p99_ms || tpot_p99_ms || itl_p99_ms || e2e_p99_ms; }
  // "P99 TTFT <= 2000 ms, P99 TPOT <= 200 ms"
  std::string ToString() const;
};

// "mlperf-llama2-70b" (TTFT 2 s, TPOT 200 ms) or "mlperf-llama2-70b-interactive" (450 ms, 40 ms).
absl::StatusOr<SlaLimits> SlaPreset(const std::string& name);

// A latency flag value: "2s", "200ms", "1.5s", or a bare number of milliseconds.
absl::StatusOr<double> ParseMilliseconds(const std::string& text);

// Whether a run met the limits; `why` says which one failed first (empty when met).
bool MeetsSla(const SlaLimits& limits, const RunReport& report, std::string* why);

// Whether one request met the per-request limits (its TTFT, TPOT and end-to-end latency against
// the P99 limits): the requests counted in goodput.
bool RequestMeetsSla(const SlaLimits& limits, const RequestRecord& record);

nlohmann::ordered_json ToJson(const SlaLimits& limits);

}  // namespace llm::loadtest
