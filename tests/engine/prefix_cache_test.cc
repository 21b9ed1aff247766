// Automatic prefix caching through the engine (engine/README.md, "KV block ownership"): requests
// that share a prefix share its blocks, and nothing of it may show in any output. Every output
// equals the one the engine gives with caching off (greedy, seeded, penalties, chunked prefill,
// overlapped steps), on every fixture; prefixes are found (hits, usage.cached_prompt_tokens),
// also while they are still being computed, also under eviction and preemption; cache salts
// separate tenants; and every block is back in the pool when everything ends.
#include <random>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "gtest/gtest.h"
#include "tests/engine/output_collector.h"
#include "tests/engine/small_engine.h"
#include "tests/runtime/fixture_reference.h"

namespace llm {
namespace {

using testing::Collector;

EngineBuildOptions Options(const std::string& model, bool caching, int64_t kv_blocks = 0) {
  EngineBuildOptions o = testing::SmallEngineOptions(testing::ModelDir(model), kv_blocks);
  o.max_context = 320;
  o.max_queue = 512;
  o.prefix_caching = caching;
  return o;
}

std::vector<int32_t> RandomTokens(std::mt19937& rng, int n) {
  std::vector<int32_t> t(n);
  for (int32_t& x : t) x = static_cast<int32_t>(rng() % 300);
  return t;
}

GenerateRequest Request(std::vector<int32_t> prompt, int max_tokens, int i) {
  GenerateRequest r;
  r.prompt_tokens = std::move(prompt);
  r.stop.max_tokens = max_tokens;
  r.stop.ignore_eos = true;
  r.detokenize = false;
  r.sampling.temperature = 0.0f;
  if (i % 3 == 1) {  // seeded sampling
    r.sampling.temperature = 0.8f;
    r.sampling.top_k = 40;
    r.has_seed = true;
    r.sampling.seed = 500 + i;
  }
  if (i % 4 == 2) r.sampling.repetition_penalty = 1.3f;
  return r;
}

// `prefixes` system prompts of `prefix_len` tokens, each followed by a few distinct user
// suffixes; and conversations whose later turns resend the earlier ones.
std::vector<GenerateRequest> SharedPrefixRequests(int prefixes, int prefix_len, int per_prefix, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<GenerateRequest> requests;
  for (int p = 0; p < prefixes; ++p) {
    const std::vector<int32_t> prefix = RandomTokens(rng, prefix_len);
    for (int u = 0; u < per_prefix; ++u) {
      std::vector<int32_t> prompt = prefix;
      const std::vector<int32_t> suffix = RandomTokens(rng, 1 + static_cast<int>(rng() % 30));
      prompt.insert(prompt.end(), suffix.begin(), suffix.end());
      requests.push_back(Request(prompt, 4 + static_cast<int>(rng() % 20), static_cast<int>(requests.size())));
    }
  }
  // A conversation: each turn is the previous prompt plus an "answer" and a new question.
  std::vector<int32_t> history = RandomTokens(rng, 40);
  for (int turn = 0; turn < 4; ++turn) {
    requests.push_back(Request(history, 8, static_cast<int>(requests.size())));
    const std::vector<int32_t> more = RandomTokens(rng, 20 + turn);
    history.insert(history.end(), more.begin(), more.end());
  }
  return requests;
}

struct EngineRun {
  std::vector<Collector::Result> results;
  EngineStats stats;
};

// All at once (`waves` == 1), or in waves that each wait for the one before (later waves find
// what earlier ones left cached).
EngineRun RunAll(const EngineBuildOptions& options, const std::vector<GenerateRequest>& requests, int waves = 1) {
  EngineRun run;
  auto built = testing::DeployLocal(options);
  EXPECT_TRUE(built.ok()) << built.status();
  if (!built.ok()) return run;
  Engine& engine = *(*built)->engine();
  Collector c;
  std::vector<RequestId> ids;
  const size_t per_wave = (requests.size() + waves - 1) / waves;
  for (size_t begin = 0; begin < requests.size(); begin += per_wave) {
    for (size_t i = begin; i < std::min(requests.size(), begin + per_wave); ++i) {
      auto id = engine.Submit(requests[i], c.Callback());
      EXPECT_TRUE(id.ok()) << id.status();
      if (id.ok()) ids.push_back(*id);
    }
    c.Wait(static_cast<int>(ids.size()));
  }
  engine.Shutdown(true);
  for (RequestId id : ids) run.results.push_back(c.Get(id));
  run.stats = engine.stats();
  return run;
}

void ExpectSameOutputs(const EngineRun& cached, const EngineRun& uncached) {
  ASSERT_EQ(cached.results.size(), uncached.results.size());
  for (size_t i = 0; i < cached.results.size(); ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(cached.results[i].tokens, uncached.results[i].tokens);
    EXPECT_EQ(cached.results[i].final.finish_reason, uncached.results[i].final.finish_reason);
    EXPECT_FALSE(cached.results[i].output_after_final);
    EXPECT_EQ(uncached.results[i].final.cached_prompt_tokens, 0);
  }
  // Every reference dropped: the pool holds nothing (cached blocks count as free).
  EXPECT_EQ(cached.stats.scheduler.kv_blocks_used, 0);
  EXPECT_EQ(uncached.stats.scheduler.kv_blocks_used, 0);
}

int64_t CachedPromptTokens(const EngineRun& run) {
  int64_t n = 0;
  for (const auto& r : run.results) n += r.final.cached_prompt_tokens;
  return n;
}

class PrefixCacheFixtureTest : public ::testing::TestWithParam<std::string> {};

// In waves: later requests find the prefixes earlier ones computed.
TEST_P(PrefixCacheFixtureTest, OutputsEqualWithCachingOnAndOff) {
  const auto requests = SharedPrefixRequests(3, 70, 4, 11);
  const EngineRun cached = RunAll(Options(GetParam(), true), requests, /*waves=*/4);
  const EngineRun uncached = RunAll(Options(GetParam(), false), requests, /*waves=*/4);
  ExpectSameOutputs(cached, uncached);
  EXPECT_GT(cached.stats.scheduler.prefix_cache_hit_tokens, 0u);
  EXPECT_GT(CachedPromptTokens(cached), 0);
  EXPECT_EQ(uncached.stats.scheduler.prefix_cache_hit_tokens, 0u);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, PrefixCacheFixtureTest,
                         ::testing::Values("llama-tiny", "llama-tiny-sharded", "llama3-tiny-bf16", "qwen2-tiny",
                                           "qwen3-tiny-fp16"));

// Everything at once: requests admitted in the step that computes their prefix take its blocks
// then (the prefix is still being computed), and requests admitted in later chunks' steps take
// what is done so far.
TEST(PrefixCacheTest, ConcurrentRequestsShareAPrefixStillBeingComputed) {
  const auto requests = SharedPrefixRequests(2, 150, 6, 12);
  const EngineRun cached = RunAll(Options("llama-tiny", true), requests);
  const EngineRun uncached = RunAll(Options("llama-tiny", false), requests);
  ExpectSameOutputs(cached, uncached);
  EXPECT_GT(cached.stats.scheduler.prefix_cache_hit_tokens, 0u);
}

// A small cache and many prefixes: cached blocks are evicted (least recently used first) and
// sequences preempted while others share their blocks; outputs stay the same.
TEST(PrefixCacheTest, EvictionAndPreemptionUnderMemoryPressure) {
  const auto requests = SharedPrefixRequests(8, 60, 3, 13);
  const EngineRun cached = RunAll(Options("qwen2-tiny", true, /*kv_blocks=*/24), requests, /*waves=*/3);
  const EngineRun uncached = RunAll(Options("qwen2-tiny", false, /*kv_blocks=*/24), requests, /*waves=*/3);
  ExpectSameOutputs(cached, uncached);
  EXPECT_GT(cached.stats.scheduler.prefix_cache_evictions, 0u);
  EXPECT_GT(cached.stats.scheduler.prefix_cache_hit_tokens, 0u);
}

// Preemption of a request whose blocks others share: one long-running request holds a shared
// prefix while others with the same prefix come and go in a cache too small for all.
TEST(PrefixCacheTest, PreemptingASequenceWhoseBlocksOthersShareLosesNothing) {
  std::mt19937 rng(14);
  const std::vector<int32_t> prefix = RandomTokens(rng, 64);
  std::vector<GenerateRequest> requests;
  for (int i = 0; i < 12; ++i) {
    std::vector<int32_t> prompt = prefix;
    const auto suffix = RandomTokens(rng, 10 + i);
    prompt.insert(prompt.end(), suffix.begin(), suffix.end());
    requests.push_back(Request(prompt, 40 + 5 * i, i));
  }
  EngineBuildOptions on = Options("llama-tiny", true, /*kv_blocks=*/20), off = Options("llama-tiny", false, 20);
  const EngineRun cached = RunAll(on, requests);
  const EngineRun uncached = RunAll(off, requests);
  ExpectSameOutputs(cached, uncached);
  EXPECT_GT(cached.stats.scheduler.preemptions, 0u);
  EXPECT_GT(cached.stats.scheduler.prefix_cache_hit_tokens, 0u);
}

// A request cancelled in the middle of prefilling a long prefix: a request sharing the prefix
// admitted meanwhile completes exactly as without caching; nothing leaks.
TEST(PrefixCacheTest, CancellingMidPrefillOfASharedPrefix) {
  std::mt19937 rng(15);
  const std::vector<int32_t> prefix = RandomTokens(rng, 250);  // three 96-token steps
  GenerateRequest first = Request(prefix, 30, 0);
  std::vector<int32_t> second_prompt = prefix;
  second_prompt.push_back(7);
  GenerateRequest second = Request(second_prompt, 12, 0);
  for (bool caching : {true, false}) {
    SCOPED_TRACE(caching);
    auto built = testing::DeployLocal(Options("llama-tiny", caching));
    ASSERT_TRUE(built.ok());
    Engine& engine = *(*built)->engine();
    Collector c;
    auto a = engine.Submit(first, c.Callback());
    auto b = engine.Submit(second, c.Callback());
    ASSERT_TRUE(a.ok() && b.ok());
    engine.Cancel(*a);
    c.Wait(2);
    engine.Shutdown(true);
    const auto second_out = c.Get(*b);
    EXPECT_EQ(second_out.final.finish_reason, FinishReason::kLength);
    EXPECT_EQ(second_out.tokens.size(), 12u);
    EXPECT_EQ(engine.stats().scheduler.kv_blocks_used, 0);
    // The reference: the second request alone, caching off.
    const EngineRun alone = RunAll(Options("llama-tiny", false), {second});
    EXPECT_EQ(second_out.tokens, alone.results[0].tokens);
  }
}

// Requests of different salts never share blocks; the same salt does.
TEST(PrefixCacheTest, CacheSaltsSeparateTenants) {
  std::mt19937 rng(16);
  const std::vector<int32_t> prompt = RandomTokens(rng, 100);
  GenerateRequest a = Request(prompt, 4, 0), b = Request(prompt, 4, 0), c = Request(prompt, 4, 0);
  a.cache_salt = "tenant-a";
  b.cache_salt = "tenant-b";
  c.cache_salt = "tenant-a";
  const EngineRun run = RunAll(Options("llama-tiny", true), {a, b, c}, /*waves=*/3);
  ASSERT_EQ(run.results.size(), 3u);
  EXPECT_EQ(run.results[0].final.cached_prompt_tokens, 0);
  EXPECT_EQ(run.results[1].final.cached_prompt_tokens, 0) << "another tenant's prompt is never found";
  EXPECT_EQ(run.results[2].final.cached_prompt_tokens, 96) << "six full blocks of the same tenant's prompt";
  EXPECT_EQ(run.results[0].tokens, run.results[1].tokens);
  EXPECT_EQ(run.results[0].tokens, run.results[2].tokens);
}

// A prompt sent again reads every full block but the one with its last token from the cache.
TEST(PrefixCacheTest, AResentPromptIsReadFromTheCache) {
  std::mt19937 rng(17);
  const std::vector<int32_t> prompt = RandomTokens(rng, 200);
  const EngineRun run = RunAll(Options("qwen3-tiny-fp16", true), {Request(prompt, 6, 0), Request(prompt, 6, 0)}, 2);
  ASSERT_EQ(run.results.size(), 2u);
  EXPECT_EQ(run.results[1].final.cached_prompt_tokens, 192);  // 12 of its 13 blocks (the 13th is partial)
  EXPECT_EQ(run.results[0].tokens, run.results[1].tokens);
  EXPECT_EQ(run.stats.scheduler.prefix_cache_hit_tokens, 192u);
}

}  // namespace
}  // namespace llm
