#include "server/loadtest/run_report.h"

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace llm::loadtest {
namespace {

constexpr int64_t kMs = 1000000;

// A request sent at `send_ms` whose tokens arrive at `token_ms` (one message each).
RequestRecord Request(int64_t send_ms, std::vector<int64_t> token_ms, int64_t end_ms) {
  RequestRecord r;
  r.send_ns = r.scheduled_ns = send_ms * kMs;
  r.expected_output = static_cast<int64_t>(token_ms.size());
  r.prompt_len = 10;
  for (int64_t t : token_ms) {
    if (r.first_token_ns >= 0) r.itl_ms.push_back(static_cast<float>((t * kMs - r.last_token_ns) / 1e6));
    if (r.first_token_ns < 0) r.first_token_ns = t * kMs;
    r.last_token_ns = t * kMs;
    ++r.output_tokens;
  }
  r.end_ns = end_ms * kMs;
  r.got_final = true;
  r.finish_reason = v1::FINISH_REASON_LENGTH;
  r.usage.set_prompt_tokens(10);
  r.usage.set_completion_tokens(static_cast<int32_t>(r.output_tokens));
  r.timings.set_queue_ms(1.5);
  return r;
}

RunResult Result() {
  RunResult result;
  result.plan.open_loop = true;
  result.plan.rate = 2;
  result.records.push_back(Request(0, {100, 110, 120, 130}, 131));  // TTFT 100, TPOT 10
  result.records.push_back(Request(500, {520, 560, 600}, 601));     // TTFT 20, TPOT 40
  RequestRecord failed = Request(900, {}, 1000);
  failed.status = grpc::StatusCode::RESOURCE_EXHAUSTED;
  failed.got_final = false;
  result.records.push_back(failed);
  result.measured_start_ns = 0;
  result.measured_end_ns = 1000 * kMs;
  result.warmup_done = 3;
  return result;
}

TEST(RunReportTest, CountsRatesAndLatencies) {
  const RunReport r = BuildReport(Result(), std::nullopt);
  EXPECT_EQ(r.mode, "poisson");
  EXPECT_EQ(r.requests, 3);
  EXPECT_EQ(r.completed, 2);
  EXPECT_EQ(r.failed, 1);
  EXPECT_EQ(r.errors.at("RESOURCE_EXHAUSTED"), 1);
  EXPECT_EQ(r.finish_reasons.at("length"), 2);
  EXPECT_EQ(r.warmup_requests, 3);
  EXPECT_EQ(r.output_tokens, 7);
  EXPECT_EQ(r.prompt_tokens, 20);
  EXPECT_EQ(r.token_count_mismatches, 0);
  EXPECT_DOUBLE_EQ(r.duration_s, 1.0);
  EXPECT_DOUBLE_EQ(r.request_throughput, 2.0);
  EXPECT_DOUBLE_EQ(r.output_token_throughput, 7.0);
  EXPECT_DOUBLE_EQ(r.total_token_throughput, 27.0);
  EXPECT_EQ(r.ttft_ms.count, 2);
  EXPECT_DOUBLE_EQ(r.ttft_ms.max, 100);
  EXPECT_DOUBLE_EQ(r.ttft_ms.min, 20);
  EXPECT_DOUBLE_EQ(r.tpot_ms.min, 10);
  EXPECT_DOUBLE_EQ(r.tpot_ms.max, 40);
  EXPECT_EQ(r.itl_ms.count, 5);  // (4 - 1) + (3 - 1)
  EXPECT_DOUBLE_EQ(r.itl_ms.max, 40);
  EXPECT_DOUBLE_EQ(r.e2e_ms.max, 131);
  EXPECT_DOUBLE_EQ(r.queue_ms.p50, 1.5);
  EXPECT_FALSE(r.sla_checked);
}

TEST(RunReportTest, ChecksTheSlaAndCountsGoodput) {
  SlaLimits sla;
  sla.ttft_p99_ms = 50;
  sla.max_error_rate = 0.5;
  const RunReport r = BuildReport(Result(), sla);
  EXPECT_TRUE(r.sla_checked);
  EXPECT_FALSE(r.sla_met);  // P99 TTFT ~99 ms
  EXPECT_NE(r.sla_failure.find("TTFT"), std::string::npos);
  EXPECT_EQ(r.requests_meeting_sla, 1);  // the second request only
  EXPECT_DOUBLE_EQ(r.goodput_rps, 1.0);

  sla.ttft_p99_ms = 200;
  EXPECT_TRUE(BuildReport(Result(), sla).sla_met);
  sla.max_error_rate = 0;  // one of three failed
  const RunReport strict = BuildReport(Result(), sla);
  EXPECT_FALSE(strict.sla_met);
  EXPECT_NE(strict.sla_failure.find("failed"), std::string::npos);
}

TEST(RunReportTest, JsonHasTheReportedFigures) {
  const nlohmann::ordered_json j = ToJson(BuildReport(Result(), std::nullopt));
  EXPECT_EQ(j["requests"]["completed"], 2);
  EXPECT_EQ(j["requests"]["errors"]["RESOURCE_EXHAUSTED"], 1);
  EXPECT_EQ(j["tokens"]["output"], 7);
  EXPECT_DOUBLE_EQ(j["throughput"]["requests_per_s"].get<double>(), 2.0);
  EXPECT_DOUBLE_EQ(j["latency_ms"]["ttft"]["max"].get<double>(), 100);
  EXPECT_EQ(j["load"]["offered_rate_rps"], 2.0);
  EXPECT_FALSE(j.contains("sla"));
}

TEST(SlaTest, ParsesLimitsAndPresets) {
  EXPECT_DOUBLE_EQ(*ParseMilliseconds("2s"), 2000);
  EXPECT_DOUBLE_EQ(*ParseMilliseconds("200ms"), 200);
  EXPECT_DOUBLE_EQ(*ParseMilliseconds("450"), 450);
  EXPECT_FALSE(ParseMilliseconds("fast").ok());
  EXPECT_FALSE(ParseMilliseconds("-1s").ok());
  EXPECT_EQ(*SlaPreset("mlperf-llama2-70b")->ttft_p99_ms, 2000);
  EXPECT_EQ(*SlaPreset("mlperf-llama2-70b")->tpot_p99_ms, 200);
  EXPECT_EQ(*SlaPreset("mlperf-llama2-70b-interactive")->ttft_p99_ms, 450);
  EXPECT_EQ(*SlaPreset("mlperf-llama2-70b-interactive")->tpot_p99_ms, 40);
  EXPECT_FALSE(SlaPreset("fast").ok());
}

// Steady state: in a closed loop of 2 calls the window opens at the second first token (both calls
// running) and closes at the last send (no call is replaced after it); only tokens inside count,
// a warm-up call's too.
TEST(RunReportTest, SteadyStateExcludesRampUpAndDrainTail) {
  RunResult result;
  result.plan.open_loop = false;
  result.plan.concurrency = 2;
  result.warmup_records.push_back(Request(0, {10, 20, 30, 40, 50}, 51));  // window [20, 52]: 20..50 -> 4
  result.records.push_back(Request(5, {20, 40, 60, 80, 100}, 101));       // 20, 40 -> 2
  result.records.push_back(Request(52, {70, 75, 80, 85, 90, 95}, 96));    // none
  result.measured_start_ns = 5 * kMs;
  result.measured_end_ns = 101 * kMs;
  const RunReport r = BuildReport(result, std::nullopt);
  EXPECT_NEAR(r.steady_window_s, 0.032, 1e-9);
  EXPECT_NEAR(r.steady_output_token_throughput, 6 / 0.032, 1e-6);
  EXPECT_NEAR(r.output_token_throughput, 11 / 0.096, 1e-6);
  // All at once (open loop, infinite rate): from the first first token to the last.
  result.plan.open_loop = true;
  const RunReport all = BuildReport(result, std::nullopt);
  EXPECT_NEAR(all.steady_window_s, 0.060, 1e-9);  // [10, 70]: 5 + 3 + 1 tokens
  EXPECT_NEAR(all.steady_output_token_throughput, 9 / 0.060, 1e-6);
}

}  // namespace
}  // namespace llm::loadtest
