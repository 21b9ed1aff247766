// The load runner against FakeLlmServer (answers at once): exact counts, every token's gap,
// open-loop pacing, closed-loop concurrency, deadlines and Stop().
#include "server/loadtest/load_runner.h"

#include <thread>

#include "benchmarks/loadtest/fake_llm_server.h"
#include "gtest/gtest.h"
#include "server/loadtest/run_report.h"

namespace llm::loadtest {
namespace {

class LoadRunnerTest : public ::testing::Test {
 protected:
  void Connect(int tokens_per_message, int fail_every = 0) {
    FakeServerOptions options;
    options.tokens_per_message = tokens_per_message;
    options.fail_every = fail_every;
    auto server = FakeLlmServer::Start(options);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    auto target = Target::Connect(server_->address(), 2, absl::Seconds(10));
    ASSERT_TRUE(target.ok()) << target.status();
    target_ = *std::move(target);
    WorkloadOptions w;
    w.input_len = LengthDistribution::Fixed(8);
    w.output_len = LengthDistribution::Fixed(20);
    const auto& m = target_->model_info();
    auto workload = Workload::Create(w, {m.vocab_size(), m.context_length(), m.has_tokenizer()}, nullptr);
    ASSERT_TRUE(workload.ok()) << workload.status();
    workload_ = *std::move(workload);
    runner_ = std::make_unique<LoadRunner>(*target_, *workload_);
  }

  std::unique_ptr<FakeLlmServer> server_;
  std::unique_ptr<Target> target_;
  std::unique_ptr<Workload> workload_;
  std::unique_ptr<LoadRunner> runner_;
};

TEST_F(LoadRunnerTest, ClosedLoopMeasuresEveryRequestAndToken) {
  Connect(/*tokens_per_message=*/1);
  RunPlan plan;
  plan.open_loop = false;
  plan.concurrency = 16;
  plan.num_requests = 300;
  plan.warmup_requests = 10;
  const RunResult result = runner_->Run(plan);
  EXPECT_EQ(server_->generate_calls(), 310);
  EXPECT_EQ(result.warmup_done, 10);
  ASSERT_EQ(result.records.size(), 300u);
  for (const RequestRecord& r : result.records) {
    ASSERT_TRUE(r.ok());
    EXPECT_FALSE(r.warmup);
    EXPECT_EQ(r.output_tokens, 20);
    EXPECT_EQ(r.itl_ms.size(), 19u);
    EXPECT_TRUE(r.got_final);
    EXPECT_EQ(r.usage.completion_tokens(), 20);
    EXPECT_LE(r.send_ns, r.first_token_ns);
    EXPECT_LE(r.first_token_ns, r.last_token_ns);
    EXPECT_LE(r.last_token_ns, r.end_ns);
    EXPECT_GE(r.send_ns, result.measured_start_ns);
    EXPECT_LE(r.end_ns, result.measured_end_ns);
  }
  const RunReport report = BuildReport(result, std::nullopt);
  EXPECT_EQ(report.output_tokens, 300 * 20);
  EXPECT_EQ(report.itl_ms.count, 300 * 19);
  EXPECT_EQ(report.token_count_mismatches, 0);
  EXPECT_EQ(report.mode, "closed-loop");
  const RunProgress p = runner_->Progress();
  EXPECT_EQ(p.done, 310);
  EXPECT_EQ(p.in_flight, 0);
}

TEST_F(LoadRunnerTest, TokensInOneMessageHaveZeroGaps) {
  Connect(/*tokens_per_message=*/4);
  RunPlan plan;
  plan.open_loop = false;
  plan.concurrency = 4;
  plan.num_requests = 20;
  const RunResult result = runner_->Run(plan);
  ASSERT_EQ(result.records.size(), 20u);
  for (const RequestRecord& r : result.records) {
    ASSERT_EQ(r.itl_ms.size(), 19u);
    int zeros = 0;
    for (float gap : r.itl_ms) zeros += gap == 0.0f;
    EXPECT_GE(zeros, 15);  // 5 messages of 4: 3 zero gaps in each
  }
}

TEST_F(LoadRunnerTest, OpenLoopKeepsTheSchedule) {
  Connect(1);
  RunPlan plan;
  plan.open_loop = true;
  plan.rate = 200;
  plan.num_requests = 100;
  const absl::Time start = absl::Now();
  const RunResult result = runner_->Run(plan);
  const double wall_s = absl::ToDoubleSeconds(absl::Now() - start);
  ASSERT_EQ(result.records.size(), 100u);
  // 99 exponential gaps of 5 ms: 0.5 s, standard deviation 0.05 s.
  EXPECT_GT(wall_s, 0.3);
  EXPECT_LT(wall_s, 1.5);
  int64_t latest_scheduled = 0;
  for (const RequestRecord& r : result.records) {
    EXPECT_GE(r.send_ns, r.scheduled_ns);
    latest_scheduled = std::max(latest_scheduled, r.scheduled_ns);
  }
  const RunReport report = BuildReport(result, std::nullopt);
  EXPECT_EQ(report.mode, "poisson");
  EXPECT_LT(report.lag_ms.p50, 5.0);  // the generator keeps up (generous for a busy CI machine)
}

TEST_F(LoadRunnerTest, DurationBoundsTheRun) {
  Connect(1);
  RunPlan plan;
  plan.open_loop = false;
  plan.concurrency = 2;
  plan.duration = absl::Milliseconds(300);
  const RunResult result = runner_->Run(plan);
  EXPECT_GT(result.records.size(), 10u);
  const double window_s = (result.measured_end_ns - result.measured_start_ns) / 1e9;
  EXPECT_GT(window_s, 0.29);
  EXPECT_LT(window_s, 1.0);
}

TEST_F(LoadRunnerTest, FailuresAreCountedByStatus) {
  Connect(1, /*fail_every=*/4);
  RunPlan plan;
  plan.open_loop = false;
  plan.concurrency = 4;
  plan.num_requests = 40;
  const RunResult result = runner_->Run(plan);
  const RunReport report = BuildReport(result, std::nullopt);
  EXPECT_EQ(report.requests, 40);
  EXPECT_EQ(report.completed, 30);
  EXPECT_EQ(report.failed, 10);
  EXPECT_EQ(report.errors.at("RESOURCE_EXHAUSTED"), 10);
  EXPECT_EQ(report.output_tokens, 30 * 20);  // failed requests add no tokens
  EXPECT_EQ(report.ttft_ms.count, 30);
}

TEST_F(LoadRunnerTest, DeadlinesEndCallsAsErrors) {
  Connect(1);
  RunPlan plan;
  plan.open_loop = false;
  plan.concurrency = 4;
  plan.num_requests = 8;
  plan.request_timeout = absl::Nanoseconds(1);
  const RunReport report = BuildReport(runner_->Run(plan), std::nullopt);
  EXPECT_EQ(report.requests, 8);
  // The fake answers within a millisecond, so a call may beat gRPC's deadline timer; those that
  // do not end with DEADLINE_EXCEEDED.
  EXPECT_EQ(report.completed +
                (report.errors.count("DEADLINE_EXCEEDED") ? report.errors.at("DEADLINE_EXCEEDED") : 0),
            8);
}

TEST_F(LoadRunnerTest, StopEndsTheRunEarly) {
  Connect(1);
  RunPlan plan;
  plan.open_loop = true;
  plan.rate = 10;
  plan.num_requests = 1000;  // 100 s if not stopped
  std::thread stopper([this] {
    absl::SleepFor(absl::Milliseconds(300));
    runner_->Stop();
  });
  const absl::Time start = absl::Now();
  const RunResult result = runner_->Run(plan);
  stopper.join();
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  EXPECT_TRUE(result.interrupted);
  EXPECT_LT(result.records.size(), 100u);
}

}  // namespace
}  // namespace llm::loadtest
