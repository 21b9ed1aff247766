// RunReport: the statistics of one load level, computed from its records. Latencies are in
// milliseconds, measured by the client from the moment a call started:
//   TTFT   start -> first message carrying a token
//   TPOT   (last token - first token) / (output tokens - 1), per request with 2 tokens or more
//   ITL    every gap between consecutive tokens, over all requests (0 for tokens that came in the
//          same message)
//   E2E    start -> the call's final status
//   queue  the server's Timings.queue_ms (accepted -> first scheduled)
//   lag    how late the generator started a request against its arrival schedule
// Throughput counts successful requests and their streamed output tokens over the measured
// window: the first measured request's start to the last one's end. That window includes the
// ramp-up and the drain tail, where fewer requests run than the load keeps in flight; the
// steady-state throughput counts only the output tokens (warm-up requests' included) that arrived
// while the load was fully running: in a closed loop of C calls, from the C-th first token (every
// call has started) to the last send (no call is replaced after it); in an open loop, from the
// first first token to the last one (no request joins after it: the drain begins).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "nlohmann/json_fwd.hpp"
#include "server/loadtest/load_runner.h"
#include "server/loadtest/sla.h"
#include "server/loadtest/summary_stats.h"

namespace llm::loadtest {

struct RunReport {
  // The load.
  std::string mode;         // "poisson", "gamma" (bursty), "closed-loop"
  double offered_rate = 0;  // requests/s asked for (infinite: all at once); 0 for closed loop
  double burstiness = 1;
  int64_t concurrency = 0;
  int64_t warmup_requests = 0;

  // Counts (measured requests only).
  int64_t requests = 0;   // sent and ended
  int64_t completed = 0;  // status OK
  int64_t failed = 0;
  std::map<std::string, int64_t> errors;          // gRPC status name -> count
  std::map<std::string, int64_t> finish_reasons;  // of completed requests
  int64_t prompt_tokens = 0;                      // of completed requests, as the server counted them
  int64_t output_tokens = 0;                      // of completed requests, as streamed
  int64_t expected_output_tokens = 0;             // sum of their max_tokens
  int64_t token_count_mismatches = 0;             // streamed tokens != the server's usage.completion_tokens
  int64_t preemptions = 0;

  // Rates.
  double duration_s = 0;
  double request_throughput = 0;       // completed / duration
  double output_token_throughput = 0;  // output tokens / duration
  double total_token_throughput = 0;   // (prompt + output tokens) / duration
  double steady_window_s = 0;                  // see above; 0 when the run had no such window
  double steady_output_token_throughput = 0;   // output tokens inside it / its length

  Summary ttft_ms, tpot_ms, itl_ms, e2e_ms, queue_ms, lag_ms;
  std::map<int32_t, Summary> ttft_ms_by_turn;  // multi-turn conversations: TTFT of each turn
  int64_t cached_prompt_tokens = 0;            // of prompt_tokens, read from the server's prefix cache
  double client_cpu_s = 0;
  bool interrupted = false;

  // With SLA limits.
  bool sla_checked = false;
  bool sla_met = false;
  std::string sla_failure;           // the first limit missed
  int64_t requests_meeting_sla = 0;  // per request (see RequestMeetsSla)
  double goodput_rps = 0;            // those / duration
};

RunReport BuildReport(const RunResult& result, const std::optional<SlaLimits>& sla);

nlohmann::ordered_json ToJson(const RunReport& report);

}  // namespace llm::loadtest
