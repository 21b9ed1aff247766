#include "server/loadtest/sla.h"

#include <cmath>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"
#include "server/loadtest/run_report.h"

namespace llm::loadtest {

std::string SlaLimits::ToString() const {
  std::vector<std::string> parts;
  if (ttft_p99_ms) parts.push_back(absl::StrCat("P99 TTFT <= ", *ttft_p99_ms, " ms"));
  if (tpot_p99_ms) parts.push_back(absl::StrCat("P99 TPOT <= ", *tpot_p99_ms, " ms"));
  if (itl_p99_ms) parts.push_back(absl::StrCat("P99 ITL <= ", *itl_p99_ms, " ms"));
  if (e2e_p99_ms) parts.push_back(absl::StrCat("P99 E2E <= ", *e2e_p99_ms, " ms"));
  parts.push_back(max_error_rate > 0 ? absl::StrCat("errors <= ", max_error_rate * 100, "%") : "no errors");
  return absl::StrJoin(parts, ", ");
}

absl::StatusOr<SlaLimits> SlaPreset(const std::string& name) {
  SlaLimits l;
  if (name == "mlperf-llama2-70b") {
    l.ttft_p99_ms = 2000;
    l.tpot_p99_ms = 200;
  } else if (name == "mlperf-llama2-70b-interactive") {
    l.ttft_p99_ms = 450;
    l.tpot_p99_ms = 40;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown SLA preset '", name, "' (mlperf-llama2-70b, mlperf-llama2-70b-interactive)"));
  }
  return l;
}

absl::StatusOr<double> ParseMilliseconds(const std::string& text) {
  double ms;
  if (absl::SimpleAtod(text, &ms) && std::isfinite(ms) && ms > 0) return ms;
  absl::Duration d;
  if (absl::ParseDuration(text, &d) && d > absl::ZeroDuration() && d < absl::InfiniteDuration())
    return absl::ToDoubleMilliseconds(d);
  return absl::InvalidArgumentError(absl::StrCat("bad latency '", text, "' (e.g. 2s, 200ms, 450)"));
}

bool MeetsSla(const SlaLimits& limits, const RunReport& r, std::string* why) {
  why->clear();
  const auto check = [&](const std::optional<double>& limit, const Summary& s, const char* name) {
    if (!why->empty() || !limit || s.p99 <= *limit) return;
    *why = absl::StrFormat("P99 %s %.1f ms > %g ms", name, s.p99, *limit);
  };
  const double error_rate =
      r.requests > 0 ? static_cast<double>(r.failed) / static_cast<double>(r.requests) : 1;
  if (r.completed == 0) {
    *why = "no request completed";
  } else if (error_rate > limits.max_error_rate) {
    *why = absl::StrCat(r.failed, " of ", r.requests, " requests failed");
  }
  check(limits.ttft_p99_ms, r.ttft_ms, "TTFT");
  check(limits.tpot_p99_ms, r.tpot_ms, "TPOT");
  check(limits.itl_p99_ms, r.itl_ms, "ITL");
  check(limits.e2e_p99_ms, r.e2e_ms, "E2E");
  return why->empty();
}

bool RequestMeetsSla(const SlaLimits& limits, const RequestRecord& r) {
  if (!r.ok() || r.output_tokens == 0) return false;
  if (limits.ttft_p99_ms && r.ttft_ms() > *limits.ttft_p99_ms) return false;
  if (limits.tpot_p99_ms && r.output_tokens > 1 && r.tpot_ms() > *limits.tpot_p99_ms) return false;
  if (limits.e2e_p99_ms && r.e2e_ms() > *limits.e2e_p99_ms) return false;
  return true;
}

nlohmann::ordered_json ToJson(const SlaLimits& l) {
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  const auto put = [&](const char* key, const std::optional<double>& v) {
    j[key] = v ? nlohmann::ordered_json(*v) : nlohmann::ordered_json(nullptr);
  };
  put("ttft_p99_ms", l.ttft_p99_ms);
  put("tpot_p99_ms", l.tpot_p99_ms);
  put("itl_p99_ms", l.itl_p99_ms);
  put("e2e_p99_ms", l.e2e_p99_ms);
  j["max_error_rate"] = l.max_error_rate;
  return j;
}

}  // namespace llm::loadtest
