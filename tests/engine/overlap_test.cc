// Overlapped steps (engine/README.md, "The step loop"): the engine launches step N+1 before it
// has collected step N, feeding step N's tokens to step N+1 on the device. None of that may be
// visible in any request's output: every output equals the one-step-at-a-time engine's (greedy,
// seeded sampling, penalties that must count the pending token, logprobs, preemption), and a
// request that stops in step N (stop token, stop string, max_tokens) never shows step N+1's
// token and leaves no block behind.
#include <random>
#include <string>
#include <vector>

#include "engine/distributed/deployment.h"
#include "engine/engine.h"
#include "gtest/gtest.h"
#include "tests/engine/output_collector.h"
#include "tests/engine/small_engine.h"
#include "tests/runtime/fixture_reference.h"

namespace llm {
namespace {

using testing::Collector;
using testing::GreedyRequest;

EngineBuildOptions Options(const std::string& model_dir, bool overlap, int64_t kv_blocks = 0) {
  EngineBuildOptions o = testing::SmallEngineOptions(model_dir, kv_blocks);
  o.overlap_steps = overlap;
  return o;
}

// Greedy and seeded requests, some with repetition/presence/frequency penalties (whose step N+1
// must count the token step N sampled, which the host does not know yet), some with logit biases,
// some with top logprobs, some stopping on token ids, of many prompt and output lengths.
std::vector<GenerateRequest> MixedRequests(const std::string& model, int count) {
  auto prompts = testing::LoadFixturePrompts(model);
  std::mt19937 rng(7);
  std::vector<GenerateRequest> requests;
  for (int i = 0; i < count; ++i) {
    std::vector<int32_t> prompt;
    if (i < 4) {
      prompt = prompts[i].prompt;
    } else {
      const int len = 1 + static_cast<int>(rng() % 150);
      for (int j = 0; j < len; ++j) prompt.push_back(static_cast<int32_t>(rng() % 300));
    }
    GenerateRequest r = GreedyRequest(prompt, 2 + static_cast<int>(rng() % 40));
    if (i % 2 == 1) {
      r.sampling.temperature = 0.9f;
      r.sampling.top_k = 50;
      r.sampling.top_p = 0.9f;
      r.has_seed = true;
      r.sampling.seed = 77 + i;
    }
    if (i % 3 == 0) {
      r.sampling.repetition_penalty = 1.5f;
      r.sampling.presence_penalty = 0.7f;
      r.sampling.frequency_penalty = 0.4f;
    }
    if (i % 5 == 0) r.sampling.num_top_logprobs = 3;
    if (i % 4 == 1) {
      const int32_t lifted = static_cast<int32_t>(rng() % 300), banned = (lifted + 1 + static_cast<int32_t>(rng() % 299)) % 300;
      r.logit_bias = {{lifted, 3.0f}, {banned, -100.0f}};
    }
    if (i % 7 == 3) r.stop.stop_token_ids = {static_cast<int32_t>(rng() % 300), static_cast<int32_t>(rng() % 300)};
    requests.push_back(r);
  }
  return requests;
}

struct RunResult {
  std::vector<Collector::Result> results;
  EngineStats stats;
};

RunResult RunAll(const EngineBuildOptions& options, const std::vector<GenerateRequest>& requests) {
  RunResult run;
  auto built = testing::DeployLocal(options);
  EXPECT_TRUE(built.ok()) << built.status();
  if (!built.ok()) return run;
  Collector c;
  std::vector<RequestId> ids;
  for (const auto& r : requests) {
    auto id = (*built)->engine()->Submit(r, c.Callback());
    EXPECT_TRUE(id.ok()) << id.status();
    if (id.ok()) ids.push_back(*id);
  }
  c.Wait(static_cast<int>(ids.size()));
  (*built)->engine()->Shutdown(true);
  for (RequestId id : ids) run.results.push_back(c.Get(id));
  run.stats = (*built)->engine()->stats();
  return run;
}

void ExpectSameOutputs(const RunResult& overlapped, const RunResult& serial) {
  ASSERT_EQ(overlapped.results.size(), serial.results.size());
  for (size_t i = 0; i < serial.results.size(); ++i) {
    SCOPED_TRACE(i);
    const Collector::Result& a = overlapped.results[i];
    const Collector::Result& b = serial.results[i];
    EXPECT_EQ(a.tokens, b.tokens);
    EXPECT_EQ(a.final.finish_reason, b.final.finish_reason);
    EXPECT_EQ(a.final.completion_tokens, b.final.completion_tokens);
    EXPECT_EQ(a.final.completion_tokens, static_cast<int32_t>(a.tokens.size()));
    EXPECT_EQ(a.text, b.text);
    EXPECT_FALSE(a.output_after_final);
    ASSERT_EQ(a.logprobs.size(), b.logprobs.size());
    for (size_t t = 0; t < a.logprobs.size(); ++t) {
      EXPECT_EQ(a.logprobs[t].token, b.logprobs[t].token);
      EXPECT_NEAR(a.logprobs[t].logprob, b.logprobs[t].logprob, 1e-4);
      ASSERT_EQ(a.logprobs[t].num_top, b.logprobs[t].num_top);
      for (int k = 0; k < a.logprobs[t].num_top; ++k) EXPECT_EQ(a.logprobs[t].top[k].token, b.logprobs[t].top[k].token);
    }
  }
  // Nothing leaked: every block is back in the pool.
  EXPECT_EQ(overlapped.stats.scheduler.kv_blocks_used, 0);
  EXPECT_EQ(overlapped.stats.scheduler.running + overlapped.stats.scheduler.waiting, 0);
}

class OverlapFixtureTest : public ::testing::TestWithParam<std::string> {};

TEST_P(OverlapFixtureTest, OutputsEqualWithOverlapOnAndOff) {
  const std::string dir = testing::ModelDir(GetParam());
  const auto requests = MixedRequests(GetParam(), 24);
  const RunResult overlapped = RunAll(Options(dir, true), requests);
  const RunResult serial = RunAll(Options(dir, false), requests);
  ExpectSameOutputs(overlapped, serial);
  // The fixture's own greedy tokens, where a request is the plain reference one.
  const auto prompts = testing::LoadFixturePrompts(GetParam());
  for (int i : {2}) {  // greedy, no penalties, no stop ids
    ASSERT_GE(overlapped.results[i].tokens.size(), 1u);
    const auto& want = prompts[i].greedy;
    const auto& got = overlapped.results[i].tokens;
    EXPECT_TRUE(std::equal(got.begin(), got.end(), want.begin())) << "request " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, OverlapFixtureTest,
                         ::testing::Values("llama-tiny", "llama-tiny-sharded", "llama3-tiny-bf16", "qwen2-tiny",
                                           "qwen3-tiny-fp16"));

// 12 blocks cannot hold 24 requests at once: sequences are preempted, some while a launched step
// still holds them, and still produce exactly the serial engine's outputs.
TEST(OverlapTest, PreemptionUnderOverlapLosesNothing) {
  const std::string dir = testing::ModelDir("llama-tiny");
  const auto requests = MixedRequests("llama-tiny", 24);
  const RunResult overlapped = RunAll(Options(dir, true, /*kv_blocks=*/16), requests);
  const RunResult serial = RunAll(Options(dir, false, /*kv_blocks=*/16), requests);
  EXPECT_GT(overlapped.stats.scheduler.preemptions, 0u);
  ExpectSameOutputs(overlapped, serial);
}

// A stop token sampled in step N: the request ends there, although step N+1 (already launched)
// computed one more token for it.
TEST(OverlapTest, StopTokenInStepNNeverEmitsStepNPlusOne) {
  const std::string dir = testing::ModelDir("qwen2-tiny");
  const auto prompts = testing::LoadFixturePrompts("qwen2-tiny");
  std::vector<GenerateRequest> requests;
  std::vector<size_t> expected_len;
  for (int i = 0; i < 4; ++i) {
    const std::vector<int32_t>& ref = prompts[i].greedy;  // the reference's 24 greedy tokens
    for (size_t k : {size_t{0}, size_t{1}, size_t{5}, size_t{17}}) {
      GenerateRequest r = GreedyRequest(prompts[i].prompt, 24);
      r.stop.stop_token_ids = {ref[k]};
      requests.push_back(r);
      expected_len.push_back(std::find(ref.begin(), ref.end(), ref[k]) - ref.begin() + 1);
    }
  }
  const RunResult run = RunAll(Options(dir, true), requests);
  ASSERT_EQ(run.results.size(), requests.size());
  for (size_t j = 0; j < requests.size(); ++j) {
    SCOPED_TRACE(j);
    const auto& ref = prompts[j / 4].greedy;
    EXPECT_EQ(run.results[j].final.finish_reason, FinishReason::kStop);
    EXPECT_EQ(run.results[j].tokens, std::vector<int32_t>(ref.begin(), ref.begin() + expected_len[j]));
    EXPECT_EQ(run.results[j].final.completion_tokens, static_cast<int32_t>(expected_len[j]));
    EXPECT_FALSE(run.results[j].output_after_final);
  }
  EXPECT_EQ(run.stats.scheduler.kv_blocks_used, 0);
}

// Stop strings are matched on the output threads, possibly after the engine ran further steps:
// the output still ends exactly where the serial engine ends it (text and tokens), and the
// streamed text equals the final text.
TEST(OverlapTest, StopStringsEndTheOutputWhereTheSerialEngineDoes) {
  const std::string dir = LLM_DEFAULT_MODEL_DIR;
  auto built = testing::DeployLocal(Options(dir, false));
  ASSERT_TRUE(built.ok()) << built.status();
  ASSERT_NE((*built)->tokenizer(), nullptr);
  const std::vector<std::string> prompts = {"The command", "To install the package", "Options:", "A file"};
  std::vector<GenerateRequest> plain;
  for (const std::string& p : prompts) {
    auto ids = (*built)->tokenizer()->Encode(p, /*add_special_tokens=*/true);
    ASSERT_TRUE(ids.ok());
    GenerateRequest r = GreedyRequest(*ids, 48);
    r.detokenize = true;
    plain.push_back(r);
  }
  (*built)->engine()->Shutdown(true);
  const RunResult unstopped = RunAll(Options(dir, false), plain);
  std::vector<GenerateRequest> stopped;
  for (size_t i = 0; i < plain.size(); ++i) {
    const std::string& text = unstopped.results[i].text;
    ASSERT_GT(text.size(), 20u) << text;
    // Stop strings from the middle and near the end of the unstopped text.
    for (size_t at : {text.size() / 3, text.size() / 2, text.size() - 4}) {
      GenerateRequest r = plain[i];
      r.stop.stop_strings = {text.substr(at, 3)};
      stopped.push_back(r);
    }
  }
  const RunResult overlapped = RunAll(Options(dir, true), stopped);
  const RunResult serial = RunAll(Options(dir, false), stopped);
  ExpectSameOutputs(overlapped, serial);
  for (size_t j = 0; j < stopped.size(); ++j) {
    SCOPED_TRACE(j);
    const std::string& full = unstopped.results[j / 3].text;
    const std::string& stop = stopped[j].stop.stop_strings[0];
    EXPECT_EQ(overlapped.results[j].final.finish_reason, FinishReason::kStop);
    EXPECT_EQ(overlapped.results[j].text, full.substr(0, full.find(stop)));
    EXPECT_LT(overlapped.results[j].tokens.size(), unstopped.results[j / 3].tokens.size());
  }
}

}  // namespace
}  // namespace llm
