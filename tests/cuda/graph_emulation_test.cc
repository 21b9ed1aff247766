// ModelRunner's CUDA-graph decode path (bucketing, padding, fixed-address metadata, capture after
// an eager run, replay) checked without a GPU: a CPU backend that "captures" by recording each op
// as a closure and "replays" by running them again, which is what a CUDA graph does (same
// arguments and addresses, new contents). The fixtures' reference logits must still match.
#include <functional>
#include <numeric>

#include "engine/backend/cpu/cpu_backend.h"
#include "engine/kv_cache/kv_block_pool.h"
#include "engine/runtime/model_runner.h"
#include "gtest/gtest.h"
#include "tests/runtime/fixture_reference.h"

namespace llm {
namespace {

class RecordingBackend final : public Backend {
 public:
  explicit RecordingBackend(int threads) : cpu_(threads) {}
  int captures = 0, replays = 0;

  Device device() const override { return cpu_.device(); }
  DType activation_dtype() const override { return cpu_.activation_dtype(); }
  absl::StatusOr<Buffer> Allocate(size_t bytes) override { return cpu_.Allocate(bytes); }
  absl::StatusOr<size_t> FreeMemory() const override { return cpu_.FreeMemory(); }
  absl::Status CopyToDevice(Tensor dst, const void* src) override {
    if (recording_) return absl::FailedPreconditionError("copy while capturing");
    return cpu_.CopyToDevice(dst, src);
  }
  absl::Status CopyToHost(void* dst, Tensor src) override { return cpu_.CopyToHost(dst, src); }
  absl::Status UploadConverted(const void* src, DType t, Tensor dst) override { return cpu_.UploadConverted(src, t, dst); }
  absl::Status Synchronize() override { return absl::OkStatus(); }

  absl::Status Embedding(Tensor table, Tensor ids, int64_t off, Tensor out) override {
    return Do([=, this] { return cpu_.Embedding(table, ids, off, out); });
  }
  absl::Status RmsNorm(Tensor x, Tensor w, float eps, Tensor out) override {
    return Do([=, this] { return cpu_.RmsNorm(x, w, eps, out); });
  }
  absl::Status AddRmsNorm(Tensor r, Tensor d, Tensor w, float eps, Tensor out) override {
    return Do([=, this] { return cpu_.AddRmsNorm(r, d, w, eps, out); });
  }
  absl::Status Add(Tensor x, Tensor y) override { return Do([=, this] { return cpu_.Add(x, y); }); }
  absl::Status Linear(Tensor x, const LinearWeight& w, Tensor out) override {
    return Do([=, this] { return cpu_.Linear(x, w, out); });
  }
  absl::Status QkvRope(const QkvRopeArgs& a) override { return Do([=, this] { return cpu_.QkvRope(a); }); }
  absl::Status Attention(const AttentionArgs& a) override { return Do([=, this] { return cpu_.Attention(a); }); }
  absl::Status SiluMul(Tensor gu, Tensor out) override { return Do([=, this] { return cpu_.SiluMul(gu, out); }); }
  absl::Status GatherRows(Tensor x, Tensor rows, Tensor out) override {
    return Do([=, this] { return cpu_.GatherRows(x, rows, out); });
  }
  absl::Status Sample(Tensor logits, absl::Span<const SampleRow> rows, absl::Span<SampleResult> results) override {
    return cpu_.Sample(logits, rows, results);
  }

  bool SupportsGraphs() const override { return true; }
  absl::Status BeginCapture() override {
    recording_ = true;
    ops_.clear();
    return absl::OkStatus();
  }
  absl::StatusOr<std::unique_ptr<StepGraph>> EndCapture() override {
    recording_ = false;
    ++captures;
    return std::unique_ptr<StepGraph>(new Graph(std::move(ops_), &replays));
  }

 private:
  using Op = std::function<absl::Status()>;
  class Graph final : public StepGraph {
   public:
    Graph(std::vector<Op> ops, int* replays) : ops_(std::move(ops)), replays_(replays) {}
    absl::Status Replay() override {
      ++*replays_;
      for (const Op& op : ops_) RETURN_IF_ERROR(op());
      return absl::OkStatus();
    }

   private:
    std::vector<Op> ops_;
    int* replays_;
  };
  absl::Status Do(Op op) {
    if (recording_) {
      ops_.push_back(std::move(op));
      return absl::OkStatus();
    }
    return op();
  }

  CpuBackend cpu_;
  bool recording_ = false;
  std::vector<Op> ops_;
};

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
    EXPECT_GT(rec->replays, 20);
    EXPECT_EQ(r.graphs_captured(), 2);
    EXPECT_TRUE(r.graph_status().ok()) << r.graph_status();
  }
}

}  // namespace
}  // namespace llm
