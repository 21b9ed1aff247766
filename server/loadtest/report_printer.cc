#include "server/loadtest/report_printer.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace llm::loadtest {
namespace {

// Send lag (P99) above which the report says the generator could not keep its schedule.
constexpr double kLagWarningMs = 10;

std::string Errors(const RunReport& r) {
  if (r.errors.empty()) return "none";
  std::vector<std::string> parts;
  for (const auto& [name, count] : r.errors) parts.push_back(absl::StrCat(name, " ", count));
  return absl::StrJoin(parts, ", ");
}

std::string Row(const char* name, const Summary& s) {
  if (s.count == 0) return absl::StrFormat("  %-18s %10s\n", name, "-");
  return absl::StrFormat("  %-18s %10.2f %10.2f %10.2f %10.2f %10.2f %9d\n", name, s.mean, s.p50, s.p90,
                         s.p99, s.max, s.count);
}

}  // namespace

std::string DescribeLoad(const RunReport& r) {
  std::string load;
  if (r.mode == "closed-loop") return absl::StrCat("closed loop, ", r.concurrency, " in flight");
  const std::string rate =
      std::isinf(r.offered_rate) ? "all at once" : absl::StrFormat("%.4g req/s", r.offered_rate);
  load = r.mode == "poisson" ? absl::StrCat("Poisson ", rate)
                             : absl::StrFormat("gamma (burstiness %.3g) %s", r.burstiness, rate);
  if (r.concurrency > 0) absl::StrAppend(&load, ", at most ", r.concurrency, " in flight");
  return load;
}

std::string FormatRunTable(const RunReport& r) {
  std::string out =
      absl::StrCat("load        ", DescribeLoad(r), r.interrupted ? "  (interrupted)" : "", "\n");
  absl::StrAppendFormat(&out, "requests    %d completed, %d failed (+%d warm-up)   duration %.2f s\n",
                        r.completed, r.failed, r.warmup_requests, r.duration_s);
  absl::StrAppendFormat(&out, "tokens      %d prompt (%d from the prefix cache), %d output (%d asked for), %d preemptions\n",
                        r.prompt_tokens, r.cached_prompt_tokens, r.output_tokens, r.expected_output_tokens,
                        r.preemptions);
  absl::StrAppendFormat(&out, "throughput  %.2f req/s   %.1f output tok/s   %.1f total tok/s\n",
                        r.request_throughput, r.output_token_throughput, r.total_token_throughput);
  if (r.steady_window_s > 0)
    absl::StrAppendFormat(&out, "steady      %.1f output tok/s over %.2f s (ramp-up and drain tail excluded)\n",
                          r.steady_output_token_throughput, r.steady_window_s);
  absl::StrAppendFormat(&out, "  %-18s %10s %10s %10s %10s %10s %9s\n", "latency (ms)", "mean", "P50", "P90",
                        "P99", "max", "n");
  out += Row("TTFT", r.ttft_ms);
  out += Row("TPOT", r.tpot_ms);
  out += Row("ITL", r.itl_ms);
  out += Row("E2E", r.e2e_ms);
  out += Row("queue (server)", r.queue_ms);
  for (const auto& [turn, summary] : r.ttft_ms_by_turn) out += Row(absl::StrCat("TTFT turn ", turn).c_str(), summary);
  out += Row("send lag", r.lag_ms);
  absl::StrAppend(&out, "errors      ", Errors(r), "\n");
  if (r.mode != "closed-loop" && !std::isinf(r.offered_rate) && r.request_throughput < 0.5 * r.offered_rate)
    absl::StrAppendFormat(
        &out,
        "warning     %.3g req/s completed against %.3g offered: the server fell behind, or the run "
        "is short against its latency (more --num-requests or a --duration)\n",
        r.request_throughput, r.offered_rate);
  if (r.lag_ms.p99 > kLagWarningMs)
    absl::StrAppendFormat(
        &out,
        "warning     the generator started requests late (send lag P99 %.1f ms): it, not the "
        "server, limited the offered load; fewer requests/s per process, or more cores\n",
        r.lag_ms.p99);
  if (r.token_count_mismatches > 0)
    absl::StrAppend(&out, "warning     ", r.token_count_mismatches,
                    " requests streamed a token count other than their usage.completion_tokens\n");
  absl::StrAppendFormat(&out, "generator   %.2f CPU s\n", r.client_cpu_s);
  if (r.sla_checked)
    absl::StrAppendFormat(&out, "SLA         %s%s   goodput %.2f req/s (%d requests within the limits)\n",
                          r.sla_met ? "met" : "missed: ", r.sla_met ? "" : r.sla_failure, r.goodput_rps,
                          r.requests_meeting_sla);
  return out;
}

std::string FormatSummaryTable(const std::vector<RunReport>& runs) {
  std::string out =
      absl::StrFormat("%-34s %9s %10s %10s %9s %9s %9s %9s %9s %9s %7s %s\n", "load", "req/s", "out tok/s",
                      "steady", "TTFT P50", "TTFT P99", "TPOT P50", "TPOT P99", "ITL P99", "E2E P99", "errors", "SLA");
  for (const RunReport& r : runs) {
    absl::StrAppendFormat(&out, "%-34s %9.2f %10.1f %10.1f %9.1f %9.1f %9.2f %9.2f %9.2f %9.1f %7d %s\n",
                          DescribeLoad(r), r.request_throughput, r.output_token_throughput,
                          r.steady_output_token_throughput, r.ttft_ms.p50,
                          r.ttft_ms.p99, r.tpot_ms.p50, r.tpot_ms.p99, r.itl_ms.p99, r.e2e_ms.p99, r.failed,
                          !r.sla_checked ? ""
                          : r.sla_met    ? "met"
                                         : absl::StrCat("missed (", r.sla_failure, ")"));
  }
  return out;
}

}  // namespace llm::loadtest
