// Whole-model parity on the GPU: every fixture model, teacher-forced, against the float32
// Hugging Face reference logits (tests/data/models/*/expected.safetensors), in bf16, fp16 and
// fp32: prompts prefilled whole (every position's logits), the greedy continuation fed one token at
// a time through the CUDA-graph decode path, several sequences decoded in one padded graph batch,
// and dummy weights generated on the GPU against the same weights generated on the host.
#include <algorithm>
#include <cstdio>
#include <map>
#include <numeric>
#include <tuple>

#include "engine/kv_cache/kv_block_pool.h"
#include "engine/model/dummy_weights.h"
#include "engine/runtime/model_runner.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/runtime/rounding_backend.h"
#include "tests/runtime/fixture_reference.h"

namespace llm {
namespace {

using testing::FixturePrompt;
using Parity = ::llm::testing::LogitParity;

// float32 matches the reference to ~1e-6. The 16-bit formats cannot match it on these fixtures,
// for any engine: their small random models have near-tied top logits, and the same model on the
// float32 CPU backend with rounding at the values a bf16 engine stores (rounding_backend.h) lands
// at 96.2-99.2% top-1 and 2.2-3.6% max relative error, with the weights alone or the KV cache
// alone already taking some fixture under 99% (rounding_emulation_test prints the table); fp16
// has ~8x less error and still flips a near-tie now and then. So each fixture's 16-bit result is
// held to the emulation of itself in that format: a kernel error shows up as error beyond what the
// format's rounding explains. The margins cover a different (equally valid) rounding order: 20-25%
// on the error and three more top-1 flips.
struct Band {
  double max_err, mean_err, top1;
};
Band BandFor(const std::string& fixture, DType t, int positions) {
  if (t == DType::kF32) return {1e-4, 1e-4, 1.0};
  static std::map<std::pair<std::string, DType>, ::llm::testing::LogitParity> emulated;
  auto it = emulated.find({fixture, t});
  if (it == emulated.end()) {
    auto parity = ::llm::testing::EmulatedParity(fixture, t, ::llm::testing::kRoundAll);
    EXPECT_TRUE(parity.ok()) << parity.status();
    it = emulated.emplace(std::make_pair(fixture, t), parity.ok() ? *parity : ::llm::testing::LogitParity{}).first;
    std::printf("[parity] %-20s %-5s emulated on the CPU (yardstick)  positions %4d  top-1 %.4f  max rel err %.3g  "
                "mean %.3g\n",
                fixture.c_str(), std::string(DTypeName(t)).c_str(), it->second.positions, it->second.agreement(),
                it->second.max_err, it->second.mean_err());
  }
  const auto& e = it->second;
  return {1.25 * e.max_err, 1.2 * e.mean_err(), e.agreement() - 3.0 / std::max(positions, 1)};
}

class CudaFixtureTest : public ::testing::TestWithParam<std::tuple<const char*, DType>> {
 protected:
  void SetUp() override {
    name_ = std::get<0>(GetParam());
    dtype_ = std::get<1>(GetParam());
    const std::string dir = ::llm::testing::ModelDir(name_);
    auto config = LoadModelConfig(dir);
    ASSERT_TRUE(config.ok()) << config.status();
    config_ = *config;
    auto ckpt = Checkpoint::Open(dir);
    ASSERT_TRUE(ckpt.ok()) << ckpt.status();
    checkpoint_ = std::move(*ckpt);
    prompts_ = ::llm::testing::LoadFixturePrompts(name_);
    ASSERT_EQ(prompts_.size(), 4u);
    vocab_ = config_.vocab_size;
  }

  std::unique_ptr<ModelRunner> MakeRunner(int32_t max_graph_batch) {
    ModelRunnerOptions options;
    options.limits.max_tokens = 512;
    options.limits.max_seqs = 16;
    options.limits.max_logit_rows = 512;  // teacher-forced: logits at every prompt position
    options.block_size = 16;
    options.num_kv_blocks = 16 * 16;
    options.max_context = 256;
    options.max_graph_batch = max_graph_batch;
    CudaBackendOptions b;
    b.dtype = dtype_;
    auto backend = CudaBackend::Create(b);
    EXPECT_TRUE(backend.ok()) << backend.status();
    if (!backend.ok()) return nullptr;
    auto runner = ModelRunner::Create(config_, *checkpoint_, std::move(*backend), nullptr, options);
    EXPECT_TRUE(runner.ok()) << runner.status();
    return runner.ok() ? std::move(*runner) : nullptr;
  }

  std::vector<int32_t> Blocks(int seq, int64_t tokens) {
    std::vector<int32_t> b(KvBlockTable::BlocksFor(tokens, 16));
    std::iota(b.begin(), b.end(), seq * 16);
    return b;
  }
  StepPlan NewPlan(const ModelRunner& r) {
    StepPlan plan;
    plan.block_table_width = r.block_table_width();
    plan.Clear();
    return plan;
  }
  static std::vector<int32_t> Context(const FixturePrompt& p) {
    std::vector<int32_t> c;  // see model_runner_test.cc: the reference generated without 0 ids
    for (int32_t id : p.prompt)
      if (id != 0) c.push_back(id);
    return c;
  }
  void Report(const char* what, const Parity& p) {
    std::printf("[parity] %-20s %-5s %-28s positions %4d  top-1 %.4f  max rel err %.3g  mean %.3g\n", name_.c_str(),
                std::string(DTypeName(dtype_)).c_str(), what, p.positions, p.agreement(), p.max_err,
                p.mean_err());
    const Band band = BandFor(name_, dtype_, p.positions);
    EXPECT_LE(p.max_err, band.max_err) << what;
    EXPECT_LE(p.mean_err(), band.mean_err) << what;
    EXPECT_GE(p.agreement(), band.top1) << what;
  }

  std::string name_;
  DType dtype_;
  ModelConfig config_;
  std::unique_ptr<Checkpoint> checkpoint_;
  std::vector<FixturePrompt> prompts_;
  int64_t vocab_ = 0;
};

// Every prompt position (prefill) and every greedy position (teacher-forced decode, graph path).
TEST_P(CudaFixtureTest, TeacherForcedLogits) {
  auto runner = MakeRunner(256);
  ASSERT_NE(runner, nullptr);
  Parity prefill, decode;
  std::vector<float> logits;
  for (int i = 0; i < 4; ++i) {
    const FixturePrompt& p = prompts_[i];
    const int64_t len = static_cast<int64_t>(p.prompt.size());
    StepPlan plan = NewPlan(*runner);
    plan.AddSequence(p.prompt, 0, Blocks(i, len), 16, true);
    plan.logit_rows.resize(len);
    std::iota(plan.logit_rows.begin(), plan.logit_rows.end(), 0);
    logits.resize(len * vocab_);
    ASSERT_TRUE(runner->ComputeLogits(plan, logits.data()).ok());
    for (int64_t r = 0; r < len; ++r) prefill.Add(&logits[r * vocab_], &p.prefill_logits[r * vocab_], vocab_);

    const std::vector<int32_t> ctx = Context(p);
    const int64_t ctx_len = static_cast<int64_t>(ctx.size());
    const auto blocks = Blocks(4 + i, ctx_len + 24);
    plan = NewPlan(*runner);
    plan.AddSequence(ctx, 0, blocks, 16, true);
    logits.resize(vocab_);
    ASSERT_TRUE(runner->ComputeLogits(plan, logits.data()).ok());
    decode.Add(logits.data(), &p.greedy_logits[0], vocab_);
    for (int step = 0; step + 1 < 24; ++step) {
      plan = NewPlan(*runner);
      plan.AddSequence({&p.greedy[step], 1}, static_cast<int32_t>(ctx_len + step), blocks, 16, true);
      ASSERT_TRUE(runner->ComputeLogits(plan, logits.data()).ok());
      decode.Add(logits.data(), &p.greedy_logits[(step + 1) * vocab_], vocab_);
    }
  }
  Report("prefill (every position)", prefill);
  Report("decode (teacher-forced)", decode);
  EXPECT_GE(runner->graphs_captured(), 1) << runner->graph_status();
  EXPECT_TRUE(runner->graph_status().ok()) << runner->graph_status();
}

// Three sequences decoded together: a padded graph batch (bucket 4) and the eager path agree with
// the reference and with each other.
TEST_P(CudaFixtureTest, BatchedDecodeGraphAndEager) {
  auto graph_runner = MakeRunner(256), eager_runner = MakeRunner(0);
  ASSERT_NE(graph_runner, nullptr);
  ASSERT_NE(eager_runner, nullptr);
  Parity graph_parity, eager_parity, between;
  std::vector<std::vector<int32_t>> ctx(3), blocks(3);
  for (ModelRunner* r : {graph_runner.get(), eager_runner.get()}) {
    StepPlan plan = NewPlan(*r);
    for (int i = 0; i < 3; ++i) {
      ctx[i] = Context(prompts_[i + 1]);
      blocks[i] = Blocks(i, static_cast<int64_t>(ctx[i].size()) + 24);
      plan.AddSequence(ctx[i], 0, blocks[i], 16, true);
    }
    std::vector<float> logits(3 * vocab_);
    ASSERT_TRUE(r->ComputeLogits(plan, logits.data()).ok());
  }
  std::vector<float> g(3 * vocab_), e(3 * vocab_);
  for (int step = 0; step + 1 < 24; ++step) {
    StepPlan gp = NewPlan(*graph_runner), ep = NewPlan(*eager_runner);
    for (int i = 0; i < 3; ++i) {
      const int32_t pos = static_cast<int32_t>(ctx[i].size()) + step;
      gp.AddSequence({&prompts_[i + 1].greedy[step], 1}, pos, blocks[i], 16, true);
      ep.AddSequence({&prompts_[i + 1].greedy[step], 1}, pos, blocks[i], 16, true);
    }
    ASSERT_TRUE(graph_runner->ComputeLogits(gp, g.data()).ok());
    ASSERT_TRUE(eager_runner->ComputeLogits(ep, e.data()).ok());
    for (int i = 0; i < 3; ++i) {
      const float* want = &prompts_[i + 1].greedy_logits[(step + 1) * vocab_];
      graph_parity.Add(&g[i * vocab_], want, vocab_);
      eager_parity.Add(&e[i * vocab_], want, vocab_);
      between.Add(&g[i * vocab_], &e[i * vocab_], vocab_);
    }
  }
  Report("batched decode, graph", graph_parity);
  Report("batched decode, eager", eager_parity);
  EXPECT_LE(between.max_err, dtype_ == DType::kF32 ? 1e-5 : 2e-2);
  EXPECT_EQ(graph_runner->graphs_captured(), 1) << graph_runner->graph_status();
  EXPECT_EQ(eager_runner->graphs_captured(), 0);
}

std::string FixtureName(const ::testing::TestParamInfo<std::tuple<const char*, DType>>& info) {
  std::string n = std::get<0>(info.param);
  for (char& c : n)
    if (c == '-') c = '_';
  return n + "_" + std::string(DTypeName(std::get<1>(info.param)));
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CudaFixtureTest,
                         ::testing::Combine(::testing::ValuesIn(::llm::testing::kFixtureModels),
                                            ::testing::Values(DType::kBF16, DType::kF16, DType::kF32)),
                         FixtureName);

// Dummy weights drawn on the GPU equal those drawn on the host (same Philox stream), so the same
// random model runs on both backends and agrees in float32.
TEST(CudaDummyWeightsTest, GpuDrawMatchesHostDraw) {
  auto config = LoadModelConfig(::llm::testing::ModelDir("qwen2-tiny"));
  ASSERT_TRUE(config.ok()) << config.status();
  ModelRunnerOptions options;
  options.limits.max_tokens = 128;
  options.limits.max_seqs = 4;
  options.limits.max_logit_rows = 128;
  options.num_kv_blocks = 32;
  options.max_context = 256;
  std::vector<std::unique_ptr<ModelRunner>> runners;
  for (bool gpu : {false, true}) {
    std::unique_ptr<Backend> backend;
    if (gpu) {
      auto b = CudaBackend::Create({.dtype = DType::kF32});
      ASSERT_TRUE(b.ok()) << b.status();
      backend = std::move(*b);
    } else {
      backend = std::make_unique<CpuBackend>(0);
    }
    auto weights = CreateDummyWeights(*config, options.shard, *backend, 42);
    ASSERT_TRUE(weights.ok()) << weights.status();
    auto runner = ModelRunner::CreateFromWeights(*config, std::move(*weights), std::move(backend), nullptr, options);
    ASSERT_TRUE(runner.ok()) << runner.status();
    runners.push_back(std::move(*runner));
  }
  const int64_t vocab = config->vocab_size;
  std::vector<int32_t> prompt(50);
  for (int i = 0; i < 50; ++i) prompt[i] = (i * 37 + 11) % static_cast<int32_t>(vocab);
  std::vector<int32_t> blocks = {3, 1, 4, 0, 5, 9};
  std::vector<std::vector<float>> out(2, std::vector<float>(vocab));
  for (int step = 0; step < 6; ++step) {
    for (int k = 0; k < 2; ++k) {
      StepPlan plan;
      plan.block_table_width = runners[k]->block_table_width();
      plan.Clear();
      if (step == 0) plan.AddSequence(prompt, 0, blocks, 16, true);
      else plan.AddSequence({&prompt[step], 1}, 49 + step, blocks, 16, true);
      ASSERT_TRUE(runners[k]->ComputeLogits(plan, out[k].data()).ok());
    }
    EXPECT_LE(::llm::testing::RelativeError(out[1].data(), out[0].data(), vocab), 1e-4) << "step " << step;
  }
}

}  // namespace
}  // namespace llm
