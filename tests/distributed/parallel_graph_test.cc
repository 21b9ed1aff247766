// The CUDA-graph decode path under tensor and pipeline parallelism, checked without a GPU: every
// rank runs its shard on the graph-emulating RecordingBackend with its TP all-reduces/all-gathers
// recorded into the graph (as NCCL's are), stages pass hidden states between graph replays, and
// the last stage's logits must still match the fixtures' float32 references at every decode step
// (padded buckets, the precomputed vocab-shard gather orders). Run under mpirun at the layout
// given by LLM_TEST_TP / LLM_TEST_PP.
#include <cstdlib>
#include <numeric>

#include "engine/distributed/pipeline_executor.h"
#include "engine/kv_cache/kv_block_pool.h"
#include "engine/runtime/model_runner.h"
#include "gtest/gtest.h"
#include "parallel/mpi_communicator.h"
#include "parallel/mpi_runtime.h"
#include "parallel/topology.h"
#include "tests/parallel/mpi_test_env.h"
#include "tests/runtime/fixture_reference.h"
#include "tests/runtime/recording_backend.h"

namespace llm {
namespace {

using ::llm::testing::RecordingBackend;
using ::llm::testing::RecordingCommunicator;

int EnvInt(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v ? std::atoi(v) : fallback;
}

class ParallelGraphTest : public ::testing::TestWithParam<const char*> {};

TEST_P(ParallelGraphTest, DecodeGraphsMatchReference) {
  const int tp = EnvInt("LLM_TEST_TP", 1), pp = EnvInt("LLM_TEST_PP", 1);
  MpiRuntime& mpi = ::llm::testing::MpiTestEnvironment::runtime();
  auto topology = mpi.MakeTopology(tp, pp);
  ASSERT_TRUE(topology.ok()) << topology.status();
  const Topology& t = *topology;
  MpiCommOptions comm_options;
  comm_options.timeout = absl::Seconds(120);
  auto groups = MakeParallelGroups(mpi, t, comm_options);
  ASSERT_TRUE(groups.ok()) << groups.status();

  const std::string name = GetParam();
  const std::string dir = ::llm::testing::ModelDir(name);
  auto config = LoadModelConfig(dir);
  ASSERT_TRUE(config.ok());
  auto ckpt = Checkpoint::Open(dir);
  ASSERT_TRUE(ckpt.ok());
  auto layers = StageLayers(static_cast<int>(config->num_layers), pp, t.pp_stage(), {});
  ASSERT_TRUE(layers.ok()) << layers.status();
  ModelRunnerOptions options;
  options.limits.max_tokens = 256;
  options.limits.max_seqs = 8;
  options.num_kv_blocks = 64;
  options.max_context = 256;
  options.shard.tp_rank = t.tp_rank();
  options.shard.tp_size = t.tp_size();
  options.shard.first_layer = layers->begin;
  options.shard.end_layer = layers->end;
  auto backend = std::make_unique<RecordingBackend>(1);
  RecordingBackend* rec = backend.get();
  RecordingCommunicator tp_comm(*groups->tp, *rec);
  auto runner = ModelRunner::Create(*config, **ckpt, std::move(backend), &tp_comm, options);
  ASSERT_TRUE(runner.ok()) << runner.status();
  ModelRunner& r = **runner;
  const int64_t vocab = config->vocab_size;
  Communicator& stages = *groups->pp;

  // One step through this rank's stage: receive the hidden state, run, send it on; the last
  // stage returns its logits (every TP rank holds the gathered vocabulary).
  // With TP the gathered vocabulary is padded to tp * vocab_local columns (padding at -1e30).
  const int64_t stride = static_cast<int64_t>(t.tp_size()) * r.dims().vocab_local;
  std::vector<float> logits(3 * stride);
  auto run = [&](const StepPlan& plan) -> absl::Status {
    ASSIGN_OR_RETURN(Tensor out, ForwardThroughStage(r, stages, t, plan));
    if (!t.is_last_stage()) return absl::OkStatus();
    RETURN_IF_ERROR(r.backend().CopyToHost(logits.data(), out));
    return r.backend().Synchronize();
  };

  const auto prompts = ::llm::testing::LoadFixturePrompts(name);
  std::vector<std::vector<int32_t>> ctx(3), blocks(3);
  StepPlan plan;
  plan.block_table_width = r.block_table_width();
  plan.Clear();
  for (int i = 0; i < 3; ++i) {
    for (int32_t id : prompts[i + 1].prompt)  // as in tests/runtime: the reference masked id 0
      if (id != 0) ctx[i].push_back(id);
    blocks[i].resize(KvBlockTable::BlocksFor(ctx[i].size() + 24, 16));
    std::iota(blocks[i].begin(), blocks[i].end(), 16 * i + 5);
    plan.AddSequence(ctx[i], 0, blocks[i], 16, /*want_logits=*/true);
  }
  ASSERT_TRUE(run(plan).ok());
  auto check = [&](int row, int seq, int step) {
    if (!t.is_last_stage()) return;
    EXPECT_LE(::llm::testing::RelativeError(&logits[row * stride], &prompts[seq + 1].greedy_logits[(step + 1) * vocab],
                                            vocab),
              1e-4)
        << "rank " << t.rank() << " step " << step << " seq " << seq;
  };
  for (int step = 0; step + 1 < 24; ++step) {
    // Alternate 3 sequences (bucket 4, one padding row) and 1 sequence (bucket 1); the others
    // then advance alone (bucket 1 too).
    const int n = step % 2 == 0 ? 3 : 1;
    plan.Clear();
    for (int i = 0; i < n; ++i)
      plan.AddSequence({&prompts[i + 1].greedy[step], 1}, static_cast<int32_t>(ctx[i].size()) + step, blocks[i], 16,
                       true);
    ASSERT_TRUE(run(plan).ok());
    for (int i = 0; i < n; ++i) check(i, i, step);
    for (int i = n; i < 3; ++i) {
      plan.Clear();
      plan.AddSequence({&prompts[i + 1].greedy[step], 1}, static_cast<int32_t>(ctx[i].size()) + step, blocks[i], 16,
                       true);
      ASSERT_TRUE(run(plan).ok());
      check(0, i, step);
    }
  }
  EXPECT_EQ(rec->captures, 2) << "rank " << t.rank();  // buckets 1 and 4, on every rank
  EXPECT_GT(rec->replays, 20) << "rank " << t.rank();
  EXPECT_EQ(r.graphs_captured(), 2);
  EXPECT_TRUE(r.graph_status().ok()) << r.graph_status();
}

// llama-tiny: GQA, untied LM head (vocab-parallel gather); qwen2-tiny: biases, tied embeddings.
INSTANTIATE_TEST_SUITE_P(Fixtures, ParallelGraphTest, ::testing::Values("llama-tiny", "qwen2-tiny"));

}  // namespace
}  // namespace llm

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  ::testing::AddGlobalTestEnvironment(new llm::testing::MpiTestEnvironment());
  return RUN_ALL_TESTS();
}
