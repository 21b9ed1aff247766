#include "server/loadtest/run_report.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "nlohmann/json.hpp"

namespace llm::loadtest {
namespace {

std::string FinishReasonName(v1::FinishReason reason) {
  std::string name = v1::FinishReason_Name(reason);
  const std::string prefix = "FINISH_REASON_";
  if (name.rfind(prefix, 0) == 0) name = name.substr(prefix.size());
  for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return name;
}

nlohmann::ordered_json Rate(double r) {
  return std::isinf(r) ? nlohmann::ordered_json("inf") : nlohmann::ordered_json(r);
}

// The steady-state window and the output tokens that arrived inside it (see run_report.h),
// counting warm-up requests' tokens too: the server produced them inside the window.
void SteadyState(const RunResult& result, RunReport& r) {
  std::vector<const RequestRecord*> all;
  for (const auto* v : {&result.records, &result.warmup_records})
    for (const RequestRecord& rec : *v)
      if (rec.ok() && rec.output_tokens > 0) all.push_back(&rec);
  if (all.size() < 2) return;
  std::vector<int64_t> first_tokens;
  int64_t last_send = 0;
  for (const RequestRecord* rec : all) {
    first_tokens.push_back(rec->first_token_ns);
    last_send = std::max(last_send, rec->send_ns);
  }
  std::sort(first_tokens.begin(), first_tokens.end());
  int64_t w0 = first_tokens.front(), w1 = first_tokens.back();
  if (!result.plan.open_loop && result.plan.concurrency > 0) {
    // Closed loop: from the moment every one of the C calls has its first token to the last send
    // (no call is replaced after it).
    w0 = first_tokens[std::min<size_t>(first_tokens.size() - 1, static_cast<size_t>(result.plan.concurrency) - 1)];
    w1 = last_send;
  }
  if (w1 <= w0) return;
  int64_t tokens = 0;
  for (const RequestRecord* rec : all) {
    double t = static_cast<double>(rec->first_token_ns);
    if (t >= w0 && t <= w1) ++tokens;
    for (float gap : rec->itl_ms) {
      t += gap * 1e6;
      if (t >= w0 && t <= w1) ++tokens;
    }
  }
  r.steady_window_s = (w1 - w0) / 1e9;
  r.steady_output_token_throughput = tokens / r.steady_window_s;
}

}  // namespace

RunReport BuildReport(const RunResult& result, const std::optional<SlaLimits>& sla) {
  const RunPlan& plan = result.plan;
  RunReport r;
  r.mode = !plan.open_loop ? "closed-loop" : plan.burstiness == 1.0 ? "poisson" : "gamma";
  r.offered_rate = plan.open_loop ? plan.rate : 0;
  r.burstiness = plan.burstiness;
  r.concurrency = plan.concurrency;
  r.warmup_requests = result.warmup_done;
  r.client_cpu_s = result.client_cpu_s;
  r.interrupted = result.interrupted;

  std::vector<double> ttft, tpot, itl, e2e, queue, lag;
  std::map<int32_t, std::vector<double>> ttft_by_turn;
  for (const RequestRecord& rec : result.records) {
    ++r.requests;
    lag.push_back((rec.send_ns - rec.scheduled_ns) / 1e6);
    if (!rec.ok()) {
      ++r.failed;
      ++r.errors[StatusCodeName(rec.status)];
      continue;
    }
    ++r.completed;
    ++r.finish_reasons[FinishReasonName(rec.finish_reason)];
    r.prompt_tokens += rec.got_final ? rec.usage.prompt_tokens() : rec.prompt_len;
    r.output_tokens += rec.output_tokens;
    r.expected_output_tokens += rec.expected_output;
    r.preemptions += rec.usage.preemptions();
    if (!rec.got_final || rec.usage.completion_tokens() != rec.output_tokens) ++r.token_count_mismatches;
    if (rec.output_tokens > 0 && rec.first_token_ns >= 0) ttft.push_back(rec.ttft_ms());
    if (rec.output_tokens > 0 && rec.turn > 0) ttft_by_turn[rec.turn].push_back(rec.ttft_ms());
    if (rec.got_final) r.cached_prompt_tokens += rec.usage.cached_prompt_tokens();
    if (rec.output_tokens > 1 && rec.first_token_ns >= 0) tpot.push_back(rec.tpot_ms());
    itl.insert(itl.end(), rec.itl_ms.begin(), rec.itl_ms.end());
    e2e.push_back(rec.e2e_ms());
    if (rec.got_final) queue.push_back(rec.timings.queue_ms());
    if (sla && RequestMeetsSla(*sla, rec)) ++r.requests_meeting_sla;
  }
  r.ttft_ms = Summarize(ttft);
  for (auto& [turn, v] : ttft_by_turn) r.ttft_ms_by_turn[turn] = Summarize(v);
  r.tpot_ms = Summarize(tpot);
  r.itl_ms = Summarize(itl);
  r.e2e_ms = Summarize(e2e);
  r.queue_ms = Summarize(queue);
  r.lag_ms = Summarize(lag);

  r.duration_s = (result.measured_end_ns - result.measured_start_ns) / 1e9;
  if (r.duration_s > 0) {
    r.request_throughput = static_cast<double>(r.completed) / r.duration_s;
    r.output_token_throughput = static_cast<double>(r.output_tokens) / r.duration_s;
    r.total_token_throughput = static_cast<double>(r.prompt_tokens + r.output_tokens) / r.duration_s;
  }
  SteadyState(result, r);
  if (sla) {
    r.sla_checked = true;
    r.sla_met = MeetsSla(*sla, r, &r.sla_failure);
    r.goodput_rps = r.duration_s > 0 ? static_cast<double>(r.requests_meeting_sla) / r.duration_s : 0;
  }
  return r;
}

nlohmann::ordered_json ToJson(const RunReport& r) {
  nlohmann::ordered_json j = {{"load",
                               {{"mode", r.mode},
                                {"offered_rate_rps", Rate(r.offered_rate)},
                                {"burstiness", r.burstiness},
                                {"concurrency", r.concurrency},
                                {"warmup_requests", r.warmup_requests}}},
                              {"requests",
                               {{"total", r.requests},
                                {"completed", r.completed},
                                {"failed", r.failed},
                                {"errors", r.errors},
                                {"finish_reasons", r.finish_reasons}}},
                              {"tokens",
                               {{"prompt", r.prompt_tokens},
                                {"output", r.output_tokens},
                                {"expected_output", r.expected_output_tokens},
                                {"count_mismatches", r.token_count_mismatches},
                                {"cached_prompt", r.cached_prompt_tokens},
                                {"preemptions", r.preemptions}}},
                              {"duration_s", r.duration_s},
                              {"throughput",
                               {{"requests_per_s", r.request_throughput},
                                {"output_tokens_per_s", r.output_token_throughput},
                                {"total_tokens_per_s", r.total_token_throughput},
                                {"steady_output_tokens_per_s", r.steady_output_token_throughput},
                                {"steady_window_s", r.steady_window_s}}},
                              {"latency_ms",
                               {{"ttft", ToJson(r.ttft_ms)},
                                {"tpot", ToJson(r.tpot_ms)},
                                {"itl", ToJson(r.itl_ms)},
                                {"e2e", ToJson(r.e2e_ms)},
                                {"server_queue", ToJson(r.queue_ms)}}},
                              {"generator", {{"send_lag_ms", ToJson(r.lag_ms)}, {"cpu_s", r.client_cpu_s}}},
                              {"interrupted", r.interrupted}};
  if (!r.ttft_ms_by_turn.empty()) {
    nlohmann::ordered_json turns = nlohmann::ordered_json::object();
    for (const auto& [turn, summary] : r.ttft_ms_by_turn) turns[std::to_string(turn)] = ToJson(summary);
    j["latency_ms"]["ttft_by_turn"] = std::move(turns);
  }
  if (r.sla_checked)
    j["sla"] = {{"met", r.sla_met},
                {"failure", r.sla_failure},
                {"requests_meeting_sla", r.requests_meeting_sla},
                {"goodput_rps", r.goodput_rps}};
  return j;
}

}  // namespace llm::loadtest
