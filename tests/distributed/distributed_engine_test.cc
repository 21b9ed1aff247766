// Tensor x pipeline parallel engine groups under mpirun (CPU backend, MPI communicators): every
// fixture model must produce its reference greedy tokens at the TP/PP layout given by
// LLM_TEST_TP / LLM_TEST_PP, exactly as on one rank.
#include <condition_variable>
#include <cstdlib>
#include <map>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "engine/distributed/engine_group.h"
#include "gtest/gtest.h"
#include "parallel/mpi_runtime.h"
#include "tests/runtime/fixture_reference.h"

namespace llm {
namespace {

MpiRuntime* g_mpi = nullptr;

class MpiEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    auto mpi = MpiRuntime::Create(MpiMode::kInit);
    ASSERT_TRUE(mpi.ok()) << mpi.status();
    mpi_ = std::move(*mpi);
    g_mpi = mpi_.get();
  }
  void TearDown() override {
    g_mpi = nullptr;
    mpi_.reset();
  }

 private:
  std::unique_ptr<MpiRuntime> mpi_;
};

int EnvInt(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v ? std::atoi(v) : fallback;
}

class DistributedEngineTest : public ::testing::TestWithParam<const char*> {};

TEST_P(DistributedEngineTest, GreedyTokensMatchReference) {
  ParallelOptions parallel;
  parallel.tp = EnvInt("LLM_TEST_TP", 1);
  parallel.pp = EnvInt("LLM_TEST_PP", 1);
  parallel.comm_timeout = absl::Seconds(120);
  EngineBuildOptions o;
  o.model_dir = testing::ModelDir(GetParam());
  o.max_context = 256;
  o.max_seqs = 8;
  o.max_tokens_per_step = 64;  // chunked prefill across ranks too
  o.num_kv_blocks = 64;
  auto group = EngineGroup::Create(o, parallel, *g_mpi);
  ASSERT_TRUE(group.ok()) << group.status();
  if (!(*group)->is_scheduler()) {
    ASSERT_TRUE((*group)->RunWorker().ok());
    return;
  }
  Engine& engine = *(*group)->engine();
  const auto prompts = testing::LoadFixturePrompts(GetParam());
  std::mutex mu;
  std::condition_variable cv;
  std::map<RequestId, std::vector<int32_t>> tokens;
  int finished = 0;
  std::vector<RequestId> ids;
  for (const auto& p : prompts) {
    GenerateRequest r;
    // As in tests/runtime: the reference generated with id 0 masked as padding.
    for (int32_t id : p.prompt)
      if (id != 0) r.prompt_tokens.push_back(id);
    r.sampling.temperature = 0.0f;
    r.stop.max_tokens = 24;
    r.stop.ignore_eos = true;
    r.detokenize = false;
    auto id = engine.Submit(r, [&](RequestOutput out) {
      std::lock_guard<std::mutex> lock(mu);
      auto& t = tokens[out.id];
      t.insert(t.end(), out.token_ids.begin(), out.token_ids.end());
      if (out.finished) {
        EXPECT_EQ(out.finish_reason, FinishReason::kLength) << out.status;
        ++finished;
        cv.notify_all();
      }
    });
    ASSERT_TRUE(id.ok()) << id.status();
    ids.push_back(*id);
  }
  {
    std::unique_lock<std::mutex> lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(300), [&] { return finished == 4; }));
  }
  for (size_t i = 0; i < prompts.size(); ++i)
    EXPECT_EQ(tokens[ids[i]], prompts[i].greedy) << GetParam() << " prompt " << i << " at tp " << parallel.tp
                                                 << " pp " << parallel.pp;
  engine.Shutdown(true);
  group->reset();  // tells the workers to stop
}

INSTANTIATE_TEST_SUITE_P(Fixtures, DistributedEngineTest, ::testing::ValuesIn(testing::kFixtureModels),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& c : n)
                             if (c == '-') c = '_';
                           return n;
                         });

}  // namespace
}  // namespace llm

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  ::testing::AddGlobalTestEnvironment(new llm::MpiEnvironment());
  return RUN_ALL_TESTS();
}
