// The CPU backend against Hugging Face transformers' float32 reference on every fixture model:
// teacher-forced logits at every prompt position and 24 greedy tokens, run whole, in chunks
// (chunked prefill over the paged cache), and with all prompts batched into one step.
#include "engine/runtime/model_runner.h"

#include <numeric>

#include "engine/backend/cpu/cpu_backend.h"
#include "engine/kv_cache/kv_block_pool.h"
#include "gtest/gtest.h"
#include "tests/runtime/fixture_reference.h"

namespace llm {
namespace {

using testing::FixturePrompt;

constexpr double kLogitTolerance = 1e-4;

class FixtureModelTest : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    const std::string dir = testing::ModelDir(GetParam());
    auto config = LoadModelConfig(dir);
    ASSERT_TRUE(config.ok()) << config.status();
    config_ = *config;
    auto ckpt = Checkpoint::Open(dir);
    ASSERT_TRUE(ckpt.ok()) << ckpt.status();
    checkpoint_ = std::move(*ckpt);
    ModelRunnerOptions options;
    options.limits.max_tokens = 512;
    options.limits.max_seqs = 160;
    options.block_size = 16;
    options.num_kv_blocks = 64;  // 4 prompts x (100 + 24) tokens fit with room to spare
    options.max_context = 256;
    auto runner = ModelRunner::Create(config_, *checkpoint_, std::make_unique<CpuBackend>(2), nullptr, options);
    ASSERT_TRUE(runner.ok()) << runner.status();
    runner_ = std::move(*runner);
    prompts_ = testing::LoadFixturePrompts(GetParam());
    ASSERT_EQ(prompts_.size(), 4u);
    vocab_ = config_.vocab_size;
  }

  // Blocks for sequence `seq`: a disjoint range per sequence, so batched sequences never collide.
  std::vector<int32_t> Blocks(int seq, int64_t tokens) {
    std::vector<int32_t> b(KvBlockTable::BlocksFor(tokens, 16));
    std::iota(b.begin(), b.end(), seq * 16);
    return b;
  }

  StepPlan NewPlan() {
    StepPlan plan;
    plan.block_table_width = runner_->block_table_width();
    plan.Clear();
    return plan;
  }

  // Feeds the prompt in chunks of `chunk` tokens (all logits kept), then greedy-decodes 24
  // tokens; checks every logit row and every token against the reference.
  void RunPrompt(int seq, const FixturePrompt& p, int chunk) {
    const int64_t len = static_cast<int64_t>(p.prompt.size());
    const auto blocks = Blocks(seq, len + 24);
    std::vector<float> logits;
    for (int64_t start = 0; start < len; start += chunk) {
      const int64_t n = std::min<int64_t>(chunk, len - start);
      StepPlan plan = NewPlan();
      plan.AddSequence(absl::MakeSpan(p.prompt).subspan(start, n), start, blocks, 16, true);
      plan.logit_rows.resize(n);
      std::iota(plan.logit_rows.begin(), plan.logit_rows.end(), 0);
      logits.resize(n * vocab_);
      ASSERT_TRUE(runner_->ComputeLogits(plan, logits.data()).ok());
      for (int64_t i = 0; i < n; ++i) {
        const double err = testing::RelativeError(&logits[i * vocab_], &p.prefill_logits[(start + i) * vocab_], vocab_);
        EXPECT_LE(err, kLogitTolerance) << "prompt position " << start + i << " of " << len;
      }
    }
    // Greedy decode through the sampler, one token per step. The reference generated with
    // attention_mask = (ids != 0): id 0 acts as padding there (masked, and later position ids
    // shifted down), though not in its teacher-forced logits. Only llama3-tiny-bf16's prompt 3
    // holds a 0, and dropping it reproduces the reference's greedy logits to ~1e-6, so the
    // generation context here is the prompt without its 0 ids.
    std::vector<int32_t> context;
    for (int32_t id : p.prompt)
      if (id != 0) context.push_back(id);
    const int64_t ctx_len = static_cast<int64_t>(context.size());
    SamplingParams greedy;
    greedy.temperature = 0.0f;
    std::vector<int32_t> generated;
    int32_t next = -1;
    for (int64_t start = 0; start < ctx_len; start += chunk) {
      const int64_t n = std::min<int64_t>(chunk, ctx_len - start);
      StepPlan plan = NewPlan();
      plan.AddSequence(absl::MakeSpan(context).subspan(start, n), start, blocks, 16, true);
      if (start + n < ctx_len) {
        plan.logit_rows.clear();
        ASSERT_TRUE(runner_->Execute(plan, {}, {}).ok());
        continue;
      }
      SampleRow row{&greedy, 0, context, {}, -1, {}};
      SampleResult result;
      ASSERT_TRUE(runner_->Execute(plan, {&row, 1}, {&result, 1}).ok());
      next = result.token;
    }
    for (int step = 0; step < 24; ++step) {
      ASSERT_EQ(next, p.greedy[step]) << "greedy token " << step;
      generated.push_back(next);
      StepPlan plan = NewPlan();
      plan.AddSequence({&next, 1}, ctx_len + step, blocks, 16, true);
      logits.resize(vocab_);
      ASSERT_TRUE(runner_->ComputeLogits(plan, logits.data()).ok());
      if (step + 1 < 24) {
        const double err = testing::RelativeError(logits.data(), &p.greedy_logits[(step + 1) * vocab_], vocab_);
        EXPECT_LE(err, kLogitTolerance) << "greedy step " << step + 1;
        next = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
      }
    }
  }

  ModelConfig config_;
  std::unique_ptr<Checkpoint> checkpoint_;
  std::unique_ptr<ModelRunner> runner_;
  std::vector<FixturePrompt> prompts_;
  int64_t vocab_ = 0;
};

TEST_P(FixtureModelTest, WholePromptLogitsAndGreedyTokens) {
  for (size_t i = 0; i < prompts_.size(); ++i) {
    SCOPED_TRACE(i);
    RunPrompt(static_cast<int>(i), prompts_[i], 512);
  }
}

TEST_P(FixtureModelTest, ChunkedPrefillMatches) {
  for (size_t i = 0; i < prompts_.size(); ++i) {
    SCOPED_TRACE(i);
    RunPrompt(static_cast<int>(i), prompts_[i], 13);
  }
}

// All four prompts in one step (a ragged batch), last-position logits only.
TEST_P(FixtureModelTest, BatchedPromptsMatch) {
  StepPlan plan = NewPlan();
  for (size_t i = 0; i < prompts_.size(); ++i)
    plan.AddSequence(prompts_[i].prompt, 0, Blocks(static_cast<int>(i), prompts_[i].prompt.size()), 16, true);
  std::vector<float> logits(prompts_.size() * vocab_);
  ASSERT_TRUE(runner_->ComputeLogits(plan, logits.data()).ok());
  for (size_t i = 0; i < prompts_.size(); ++i) {
    const int64_t last = static_cast<int64_t>(prompts_[i].prompt.size()) - 1;
    EXPECT_LE(testing::RelativeError(&logits[i * vocab_], &prompts_[i].prefill_logits[last * vocab_], vocab_),
              kLogitTolerance)
        << "prompt " << i;
  }
}

std::string ParamName(const ::testing::TestParamInfo<const char*>& info) {
  std::string n = info.param;
  for (char& c : n)
    if (c == '-') c = '_';
  return n;
}

INSTANTIATE_TEST_SUITE_P(Fixtures, FixtureModelTest, ::testing::ValuesIn(testing::kFixtureModels), ParamName);

// Options the runner cannot work with are refused with a status, never a crash (a block size of 0
// divided by zero before this check).
TEST(ModelRunnerOptionsTest, OutOfRangeOptionsAreRefused) {
  const std::string dir = testing::ModelDir("llama-tiny");
  auto config = LoadModelConfig(dir);
  ASSERT_TRUE(config.ok());
  auto ckpt = Checkpoint::Open(dir);
  ASSERT_TRUE(ckpt.ok());
  auto refused = [&](auto mutate, const std::string& text) {
    ModelRunnerOptions options;
    options.limits.max_tokens = 64;
    options.limits.max_seqs = 4;
    options.max_context = 128;
    mutate(options);
    auto runner = ModelRunner::Create(*config, **ckpt, std::make_unique<CpuBackend>(1), nullptr, options);
    ASSERT_FALSE(runner.ok()) << text;
    EXPECT_EQ(runner.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(std::string(runner.status().message()).find(text), std::string::npos) << runner.status();
  };
  refused([](ModelRunnerOptions& o) { o.block_size = 0; }, "KV block size must be at least 1");
  refused([](ModelRunnerOptions& o) { o.kv_cache_fraction = 1.5; }, "KV cache fraction must be in (0, 1]");
  refused([](ModelRunnerOptions& o) { o.num_kv_blocks = -2; }, "KV cache blocks must be >= 0");
}
// Every FP8 layout, loaded as published (E4M3 weights and their scales) and computed on the
// dequantized weights with float32 inputs and a float32 KV cache: the references' own math.
INSTANTIATE_TEST_SUITE_P(Fp8Fixtures, FixtureModelTest, ::testing::ValuesIn(testing::kFp8FixtureModels), ParamName);
// Every 4-bit layout (AutoAWQ, GPTQ with act-order and symmetric, compressed-tensors symmetric and
// asymmetric with act-order), repacked at load and computed on the dequantized codes.
INSTANTIATE_TEST_SUITE_P(Int4Fixtures, FixtureModelTest, ::testing::ValuesIn(testing::kInt4FixtureModels),
                         ParamName);

}  // namespace
}  // namespace llm
