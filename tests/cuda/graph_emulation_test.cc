// ModelRunner's CUDA-graph decode path (bucketing, padding, fixed-address metadata, capture after
// an eager run, replay) checked without a GPU, on the graph-emulating RecordingBackend. The
// fixtures' reference logits must still match.
#include <numeric>

#include "engine/kv_cache/kv_block_pool.h"
#include "engine/runtime/model_runner.h"
#include "gtest/gtest.h"
#include "tests/runtime/fixture_reference.h"
#include "tests/runtime/recording_backend.h"

namespace llm {
namespace {

using ::llm::testing::RecordingBackend;

TEST(GraphEmulationTest, PaddedDecodeGraphsMatchReference) {
  for (const char* name : {"llama3-tiny-bf16", "qwen3-tiny-fp16"}) {
    SCOPED_TRACE(name);
    const std::string dir = ::llm::testing::ModelDir(name);
    auto config = LoadModelConfig(dir);
    ASSERT_TRUE(config.ok());
    auto ckpt = Checkpoint::Open(dir);
    ASSERT_TRUE(ckpt.ok());
    const auto prompts = ::llm::testing::LoadFixturePrompts(name);
    ModelRunnerOptions options;
    options.limits.max_tokens = 256;
    options.limits.max_seqs = 8;
    options.num_kv_blocks = 64;
    options.max_context = 256;
    auto backend = std::make_unique<RecordingBackend>(2);
    RecordingBackend* rec = backend.get();
    auto runner = ModelRunner::Create(*config, **ckpt, std::move(backend), nullptr, options);
    ASSERT_TRUE(runner.ok()) << runner.status();
    ModelRunner& r = **runner;
    const int64_t vocab = config->vocab_size;
    // Prompts 1..3 (no 0 ids among them except llama3's prompt 3; strip as the CPU test does).
    std::vector<std::vector<int32_t>> ctx(3), blocks(3);
    StepPlan plan;
    plan.block_table_width = r.block_table_width();
    plan.Clear();
    for (int i = 0; i < 3; ++i) {
      for (int32_t id : prompts[i + 1].prompt)
        if (id != 0) ctx[i].push_back(id);
      blocks[i].resize(KvBlockTable::BlocksFor(ctx[i].size() + 24, 16));
      std::iota(blocks[i].begin(), blocks[i].end(), 16 * i + 5);
      plan.AddSequence(ctx[i], 0, blocks[i], 16, true);
    }
    std::vector<float> logits(3 * vocab);
    ASSERT_TRUE(r.ComputeLogits(plan, logits.data()).ok());
    for (int step = 0; step + 1 < 24; ++step) {
      // Alternate 3 sequences (bucket 4, one padding row) and 1 sequence (bucket 1).
      const int n = step % 2 == 0 ? 3 : 1;
      plan.Clear();
      for (int i = 0; i < 3; ++i) {
        if (i >= n) continue;
        plan.AddSequence({&prompts[i + 1].greedy[step], 1}, static_cast<int32_t>(ctx[i].size()) + step, blocks[i], 16,
                         true);
      }
      ASSERT_TRUE(r.ComputeLogits(plan, logits.data()).ok());
      for (int i = 0; i < n; ++i)
        EXPECT_LE(::llm::testing::RelativeError(&logits[i * vocab], &prompts[i + 1].greedy_logits[(step + 1) * vocab],
                                                vocab),
                  1e-4)
            << "step " << step << " seq " << i;
      // Sequences not in this step still advance: feed them alone (eager path is not used here:
      // they are single-sequence decode steps too, bucket 1).
      for (int i = n; i < 3; ++i) {
        plan.Clear();
        plan.AddSequence({&prompts[i + 1].greedy[step], 1}, static_cast<int32_t>(ctx[i].size()) + step, blocks[i], 16,
                         true);
        ASSERT_TRUE(r.ComputeLogits(plan, logits.data()).ok());
        EXPECT_LE(::llm::testing::RelativeError(logits.data(), &prompts[i + 1].greedy_logits[(step + 1) * vocab], vocab),
                  1e-4)
            << "step " << step << " seq " << i;
      }
    }
    EXPECT_EQ(rec->captures, 2);  // buckets 1 and 4
    // Each capture follows one eager tuning pass over the same step (where the CUDA backend times
    // its kernel choices), and nothing else runs in one.
    EXPECT_EQ(rec->tuning_passes, 2);
    EXPECT_EQ(rec->linears_while_tuning, 2 * (4 * config->num_layers + 1));
    EXPECT_GT(rec->replays, 20);
    EXPECT_EQ(r.graphs_captured(), 2);
    EXPECT_TRUE(r.graph_status().ok()) << r.graph_status();
  }
}

}  // namespace
}  // namespace llm
