// The engine through its façade on the CPU backend: continuous batching must not change any
// request's output (greedy or seeded sampling), preemption must lose nothing, and cancellation,
// deadlines, queue limits and draining behave as the contract in engine/README.md says.
#include "engine/engine.h"

#include <condition_variable>
#include <map>
#include <mutex>
#include <random>

#include "engine/distributed/deployment.h"
#include "gtest/gtest.h"
#include "tests/engine/output_collector.h"
#include "tests/engine/small_engine.h"
#include "tests/runtime/fixture_reference.h"

namespace llm {
namespace {

using testing::Collector;
using testing::GreedyRequest;

EngineBuildOptions Options(const std::string& model, int64_t kv_blocks = 0) {
  return testing::SmallEngineOptions(testing::ModelDir(model), kv_blocks);
}

std::vector<int32_t> RunAlone(const GenerateRequest& request, const std::string& model) {
  auto built = testing::DeployLocal(Options(model));
  EXPECT_TRUE(built.ok()) << built.status();
  Collector c;
  auto id = (*built)->engine()->Submit(request, c.Callback());
  EXPECT_TRUE(id.ok()) << id.status();
  c.Wait(1);
  return c.Get(*id).tokens;
}

// A mix of requests: the fixture prompts (with reference greedy tokens) plus random prompts of
// many lengths, greedy and seeded-sampled, with different output lengths.
std::vector<GenerateRequest> MixedRequests(const std::string& model, int count) {
  auto prompts = testing::LoadFixturePrompts(model);
  std::mt19937 rng(42);
  std::vector<GenerateRequest> requests;
  for (int i = 0; i < count; ++i) {
    std::vector<int32_t> prompt;
    if (i < 4) {
      prompt = prompts[i].prompt;
    } else {
      const int len = 1 + static_cast<int>(rng() % 150);
      for (int j = 0; j < len; ++j) prompt.push_back(static_cast<int32_t>(rng() % 300));
    }
    GenerateRequest r = GreedyRequest(prompt, i < 4 ? 24 : 1 + static_cast<int>(rng() % 40));
    if (i % 3 == 2) {  // seeded sampling: reproducible whatever the batch
      r.sampling.temperature = 0.8f;
      r.sampling.top_k = 40;
      r.sampling.top_p = 0.95f;
      r.has_seed = true;
      r.sampling.seed = 1000 + i;
    }
    requests.push_back(r);
  }
  return requests;
}

void ExpectBatchedEqualsAlone(const std::string& model, int64_t kv_blocks, bool expect_preemption) {
  const auto requests = MixedRequests(model, 24);
  auto built = testing::DeployLocal(Options(model, kv_blocks));
  ASSERT_TRUE(built.ok()) << built.status();
  Collector c;
  std::vector<RequestId> ids;
  for (const auto& r : requests) {
    auto id = (*built)->engine()->Submit(r, c.Callback());
    ASSERT_TRUE(id.ok()) << id.status();
    ids.push_back(*id);
  }
  c.Wait(static_cast<int>(requests.size()));
  const auto prompts = testing::LoadFixturePrompts(model);
  for (size_t i = 0; i < requests.size(); ++i) {
    SCOPED_TRACE(i);
    const auto result = c.Get(ids[i]);
    EXPECT_EQ(result.final.finish_reason, FinishReason::kLength);
    EXPECT_EQ(result.tokens.size(), static_cast<size_t>(requests[i].stop.max_tokens));
    if (i < 4 && i % 3 != 2) {
      EXPECT_EQ(result.tokens, prompts[i].greedy);  // the reference's own tokens
    }
    EXPECT_EQ(result.tokens, RunAlone(requests[i], model));
  }
  const EngineStats stats = (*built)->engine()->stats();
  if (expect_preemption) {
    EXPECT_GT(stats.scheduler.preemptions, 0u);
  }
  EXPECT_EQ(stats.scheduler.kv_blocks_used, 0);  // everything returned to the pool
}

TEST(EngineTest, ConcurrentRequestsEqualRunningAlone) { ExpectBatchedEqualsAlone("qwen2-tiny", 0, false); }

// 12 blocks of 16 tokens cannot hold 24 requests of up to 174 tokens at once: sequences are
// preempted and recomputed, and still produce exactly their solo outputs.
TEST(EngineTest, PreemptionUnderSmallKvCacheLosesNothing) { ExpectBatchedEqualsAlone("llama-tiny", 16, true); }

TEST(EngineTest, CancelFreesBlocksWithinAStep) {
  auto built = testing::DeployLocal(Options("llama-tiny"));
  ASSERT_TRUE(built.ok());
  Engine& engine = *(*built)->engine();
  std::mutex mu;
  std::condition_variable cv;
  int updates = 0;
  RequestOutput last;
  auto id = engine.Submit(GreedyRequest({1, 2, 3, 4, 5}, 200), [&](RequestOutput out) {
    std::lock_guard<std::mutex> lock(mu);
    ++updates;
    last = out;
    cv.notify_all();
  });
  ASSERT_TRUE(id.ok());
  {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return updates >= 3; });
  }
  engine.Cancel(*id);
  {
    std::unique_lock<std::mutex> lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(10), [&] { return last.finished; }));
  }
  EXPECT_EQ(last.finish_reason, FinishReason::kCancelled);
  EXPECT_LT(last.completion_tokens, 200);
  // The stats snapshot is taken after each loop iteration.
  for (int i = 0; i < 100 && engine.stats().scheduler.kv_blocks_used != 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(engine.stats().scheduler.kv_blocks_used, 0);
  EXPECT_EQ(engine.stats().scheduler.running, 0);
}

TEST(EngineTest, ExpiredDeadlineFinishesWithDeadline) {
  auto built = testing::DeployLocal(Options("llama-tiny"));
  ASSERT_TRUE(built.ok());
  Collector c;
  GenerateRequest r = GreedyRequest({1, 2, 3}, 200);
  r.deadline = absl::Now() - absl::Milliseconds(1);
  auto id = (*built)->engine()->Submit(r, c.Callback());
  ASSERT_TRUE(id.ok());
  c.Wait(1);
  EXPECT_EQ(c.Get(*id).final.finish_reason, FinishReason::kDeadline);
}

TEST(EngineTest, QueueFullAndShutdownAreRefusedWithStatus) {
  EngineBuildOptions o = Options("llama-tiny");
  o.max_queue = 2;
  o.max_seqs = 1;
  auto built = testing::DeployLocal(o);
  ASSERT_TRUE(built.ok());
  Collector c;
  int accepted = 0, exhausted = 0;
  for (int i = 0; i < 20; ++i) {
    auto id = (*built)->engine()->Submit(GreedyRequest({1, 2, 3}, 100), c.Callback());
    if (id.ok()) ++accepted;
    else if (id.status().code() == absl::StatusCode::kResourceExhausted) ++exhausted;
  }
  EXPECT_GT(exhausted, 0);
  (*built)->engine()->Shutdown(/*drain=*/true);  // accepted requests all complete
  c.Wait(accepted);
  auto late = (*built)->engine()->Submit(GreedyRequest({1}, 1), c.Callback());
  EXPECT_EQ(late.status().code(), absl::StatusCode::kUnavailable);
}

TEST(EngineTest, InvalidRequestsAreRejectedWithMessages) {
  auto built = testing::DeployLocal(Options("llama-tiny"));
  ASSERT_TRUE(built.ok());
  Engine& e = *(*built)->engine();
  auto expect_invalid = [&](GenerateRequest r, const std::string& text) {
    auto s = e.Validate(r);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << text;
    EXPECT_NE(std::string(s.message()).find(text), std::string::npos) << s;
  };
  expect_invalid(GreedyRequest({}, 5), "empty");
  expect_invalid(GreedyRequest({1, 512}, 5), "outside the vocabulary");
  expect_invalid(GreedyRequest({1, 2}, 0), "max_tokens");
  expect_invalid(GreedyRequest({1, 2}, 300), "exceeds the context");
  GenerateRequest r = GreedyRequest({1, 2}, 5);
  r.sampling.temperature = -1;
  expect_invalid(r, "temperature");
  r = GreedyRequest({1, 2}, 5);
  r.sampling.top_p = 0;
  expect_invalid(r, "top_p");
  r = GreedyRequest({1, 2}, 5);
  r.sampling.num_top_logprobs = 21;
  expect_invalid(r, "logprobs");
  r = GreedyRequest({1, 2}, 5);
  r.stop.stop_strings = {"x"};
  expect_invalid(r, "tokenizer");  // fixture models ship no tokenizer
  r = GreedyRequest({1, 2}, 5);
  r.logit_bias = {{3, 1.0f}, {512, 1.0f}};
  expect_invalid(r, "logit_bias token id 512 is outside the vocabulary");
  r.logit_bias = {{3, 100.5f}};
  expect_invalid(r, "must be in [-100, 100]");
  r.logit_bias = {{7, 1.0f}, {3, 1.0f}, {7, -1.0f}};
  expect_invalid(r, "names token 7 twice");
  r.logit_bias.clear();
  for (int32_t t = 0; t <= kMaxLogitBiasTokens; ++t) r.logit_bias.push_back({t % 512, 0.0f});
  expect_invalid(r, "at most 1024");
}

// logit_bias against the fixture's reference logits (transformers): +100 forces a token at every
// step; -100 on the greedy token gives the reference's second-best token.
TEST(EngineTest, LogitBiasForcesAndBansTokens) {
  auto built = testing::DeployLocal(Options("llama-tiny"));
  ASSERT_TRUE(built.ok());
  const auto p = testing::LoadFixturePrompts("llama-tiny")[1];
  const int64_t vocab = (*built)->engine()->info().config.vocab_size;
  const float* row = &p.prefill_logits[(p.prompt.size() - 1) * vocab];
  int32_t second = -1;
  for (int32_t t = 0; t < vocab; ++t)
    if (t != p.greedy[0] && (second < 0 || row[t] > row[second])) second = t;
  Collector c;
  GenerateRequest forced = GreedyRequest(p.prompt, 6);
  forced.logit_bias = {{17, 100.0f}};
  GenerateRequest banned = GreedyRequest(p.prompt, 1);
  banned.logit_bias = {{p.greedy[0], -100.0f}};
  banned.sampling.num_top_logprobs = 1;
  auto a = (*built)->engine()->Submit(forced, c.Callback());
  auto b = (*built)->engine()->Submit(banned, c.Callback());
  ASSERT_TRUE(a.ok() && b.ok());
  c.Wait(2);
  EXPECT_EQ(c.Get(*a).tokens, std::vector<int32_t>(6, 17));
  ASSERT_EQ(c.Get(*b).tokens.size(), 1u);
  EXPECT_EQ(c.Get(*b).tokens[0], second);
  // The logprobs are the unbiased distribution's: its top token is still the greedy one.
  ASSERT_EQ(c.Get(*b).logprobs.size(), 1u);
  EXPECT_EQ(c.Get(*b).logprobs[0].top[0].token, p.greedy[0]);
}

TEST(EngineTest, LogprobsAreRawDistribution) {
  auto built = testing::DeployLocal(Options("llama-tiny"));
  ASSERT_TRUE(built.ok());
  Collector c;
  GenerateRequest r = GreedyRequest(testing::LoadFixturePrompts("llama-tiny")[1].prompt, 1);
  r.sampling.num_top_logprobs = 5;
  std::vector<RequestOutput> outs;
  std::mutex mu;
  auto id = (*built)->engine()->Submit(r, [&](RequestOutput o) {
    std::lock_guard<std::mutex> lock(mu);
    outs.push_back(o);
  });
  ASSERT_TRUE(id.ok());
  (*built)->engine()->Shutdown(true);
  ASSERT_FALSE(outs.empty());
  const SampleResult& lp = outs.front().logprobs.at(0);
  // Reference: log-softmax of the fixture's logits at the last prompt position.
  const auto p = testing::LoadFixturePrompts("llama-tiny")[1];
  const int64_t vocab = (*built)->engine()->info().config.vocab_size;
  const float* row = &p.prefill_logits[(p.prompt.size() - 1) * vocab];
  double mx = *std::max_element(row, row + vocab), z = 0;
  for (int64_t i = 0; i < vocab; ++i) z += std::exp(row[i] - mx);
  EXPECT_EQ(lp.token, p.greedy[0]);
  EXPECT_NEAR(lp.logprob, row[p.greedy[0]] - mx - std::log(z), 1e-4);
  EXPECT_EQ(lp.num_top, 5);
  EXPECT_EQ(lp.top[0].token, p.greedy[0]);
  for (int i = 1; i < 5; ++i) EXPECT_LE(lp.top[i].logprob, lp.top[i - 1].logprob);
}

}  // namespace
}  // namespace llm
