// The engine (CPU backend, float32) against an independent float64 forward pass on synthetic
// checkpoints covering what the fixtures do not: MQA, odd and non-power-of-two sizes, head_dim
// unrelated to hidden/heads, every bias, q/k norms, sliding windows, llama3 rope scaling, tied
// embeddings, fp16/bf16 storage and sharded files.
#include <unistd.h>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "engine/backend/cpu/cpu_backend.h"
#include "engine/kv_cache/kv_block_pool.h"
#include "engine/runtime/model_runner.h"
#include "gtest/gtest.h"
#include "tests/runtime/fixture_reference.h"
#include "tests/runtime/synthetic_checkpoint.h"

namespace llm {
namespace {

using testing::SyntheticSpec;

struct Case {
  std::string name;
  SyntheticSpec spec;
};
void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

std::vector<Case> Cases() {
  std::vector<Case> cases;
  SyntheticSpec mqa;  // multi-query attention, odd sizes, tied, bf16, sharded
  mqa.hidden = 60, mqa.heads = 6, mqa.kv_heads = 1, mqa.head_dim = 10, mqa.ffn = 131, mqa.vocab = 97;
  mqa.layers = 3, mqa.tied = true, mqa.stored = DType::kBF16, mqa.shards = 3, mqa.explicit_head_dim = false;
  cases.push_back({"mqa_odd_tied_bf16_sharded", mqa});

  SyntheticSpec qwen2;  // q/k/v biases, fp16, untied, head_dim 18
  qwen2.architecture = "Qwen2ForCausalLM", qwen2.model_type = "qwen2";
  qwen2.hidden = 72, qwen2.heads = 4, qwen2.kv_heads = 2, qwen2.head_dim = 18, qwen2.ffn = 100, qwen2.vocab = 203;
  qwen2.qkv_bias = true, qwen2.stored = DType::kF16, qwen2.theta = 1e6, qwen2.explicit_head_dim = false;
  cases.push_back({"qwen2_biases_fp16", qwen2});

  SyntheticSpec qwen3;  // q/k norms, head_dim 24 != hidden / heads, MHA, tied
  qwen3.architecture = "Qwen3ForCausalLM", qwen3.model_type = "qwen3";
  qwen3.hidden = 40, qwen3.heads = 5, qwen3.kv_heads = 5, qwen3.head_dim = 24, qwen3.ffn = 88, qwen3.vocab = 150;
  qwen3.qk_norm = true, qwen3.tied = true, qwen3.theta = 1e6;
  cases.push_back({"qwen3_qknorm_headdim", qwen3});

  SyntheticSpec llama;  // attention and MLP biases, llama3 rope scaling beyond its original context
  llama.hidden = 48, llama.heads = 4, llama.kv_heads = 2, llama.head_dim = 12, llama.ffn = 77, llama.vocab = 64;
  llama.o_bias = true, llama.qkv_bias = true, llama.mlp_bias = true, llama.llama3_rope = true, llama.theta = 5e5;
  llama.stored = DType::kBF16;
  cases.push_back({"llama_biases_llama3_rope", llama});

  SyntheticSpec mistral;  // sliding window shorter than the prompt
  mistral.architecture = "MistralForCausalLM", mistral.model_type = "mistral";
  mistral.hidden = 32, mistral.heads = 4, mistral.kv_heads = 1, mistral.head_dim = 8, mistral.ffn = 64;
  mistral.vocab = 80, mistral.sliding_window = 9;
  cases.push_back({"mistral_sliding_window", mistral});
  return cases;
}

class SyntheticModelTest : public ::testing::TestWithParam<Case> {};

TEST_P(SyntheticModelTest, LogitsMatchFloat64Reference) {
  const SyntheticSpec& spec = GetParam().spec;
  const auto model = testing::MakeSynthetic(spec);
  const std::string dir = ::testing::TempDir() + "/synthetic_" + GetParam().name + "_" + std::to_string(getpid());
  testing::WriteCheckpoint(dir, model);

  auto config = LoadModelConfig(dir);
  ASSERT_TRUE(config.ok()) << config.status();
  auto ckpt = Checkpoint::Open(dir);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  ModelRunnerOptions options;
  options.limits.max_tokens = 64;
  options.limits.max_seqs = 64;
  options.num_kv_blocks = 16;
  options.max_context = 128;
  auto runner = ModelRunner::Create(*config, **ckpt, std::make_unique<CpuBackend>(2), nullptr, options);
  ASSERT_TRUE(runner.ok()) << runner.status();

  std::mt19937 rng(7);
  std::vector<int32_t> tokens(45);
  for (int32_t& t : tokens) t = static_cast<int32_t>(rng() % spec.vocab);
  const auto reference = testing::ReferenceLogits(model, tokens);
  std::vector<int32_t> blocks(KvBlockTable::BlocksFor(tokens.size(), 16));
  std::iota(blocks.begin(), blocks.end(), 3);

  // Chunks of 7 for the first 30 tokens (chunked prefill over the paged cache), then one token
  // per step (decode).
  std::vector<float> logits;
  for (int start = 0; start < static_cast<int>(tokens.size());) {
    const int n = start < 30 ? std::min(7, 30 - start) : 1;
    StepPlan plan;
    plan.block_table_width = (*runner)->block_table_width();
    plan.Clear();
    plan.AddSequence(absl::MakeSpan(tokens).subspan(start, n), start, blocks, 16, true);
    plan.logit_rows.resize(n);
    std::iota(plan.logit_rows.begin(), plan.logit_rows.end(), 0);
    logits.resize(static_cast<size_t>(n) * spec.vocab);
    ASSERT_TRUE((*runner)->ComputeLogits(plan, logits.data()).ok());
    for (int i = 0; i < n; ++i) {
      std::vector<float> ref(reference.begin() + (start + i) * spec.vocab,
                             reference.begin() + (start + i + 1) * spec.vocab);
      EXPECT_LE(testing::RelativeError(&logits[i * spec.vocab], ref.data(), spec.vocab), 1e-4)
          << "position " << start + i;
    }
    start += n;
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, SyntheticModelTest, ::testing::ValuesIn(Cases()),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace llm
