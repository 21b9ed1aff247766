// A step that one rank rejects fails on every rank within a second, under mpirun at the layout
// LLM_TEST_TP x LLM_TEST_PP: the last rank is built with a smaller step budget than the scheduler
// plans with (what ranks started with different settings would do, had start-up not compared
// them), so it rejects the first prefill while its peers wait for it in a collective or for its
// stage's output. Its abort notice ends those waits at once, long before the communicators'
// 300 s deadline: the request fails with the rejecting rank's reason, every rank's loop returns,
// and the engine reports that it will not serve again (a server then exits non-zero).
#include <condition_variable>
#include <cstdlib>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "engine/distributed/engine_group.h"
#include "gtest/gtest.h"
#include "tests/parallel/mpi_test_env.h"
#include "tests/runtime/fixture_reference.h"

namespace llm {
namespace {

[[maybe_unused]] ::testing::Environment* const kEnv =
    ::testing::AddGlobalTestEnvironment(new ::llm::testing::MpiTestEnvironment);

int EnvInt(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v ? std::atoi(v) : fallback;
}

TEST(StepAbortTest, RejectedStepFailsOnEveryRankWithinASecond) {
  MpiCommunicator& test_world = ::llm::testing::MpiTestEnvironment::world();
  ParallelOptions parallel;
  parallel.tp = EnvInt("LLM_TEST_TP", 1);
  parallel.pp = EnvInt("LLM_TEST_PP", 1);
  parallel.comm_timeout = absl::Seconds(300);
  if (parallel.tp * parallel.pp < 2) GTEST_SKIP() << "needs a group of at least 2 ranks";
  const int rejecting = test_world.size() - 1;
  EngineBuildOptions o;
  o.model_dir = ::llm::testing::ModelDir("llama-tiny");
  o.max_context = 256;
  o.max_seqs = 8;
  o.num_kv_blocks = 64;
  o.max_tokens_per_step = test_world.rank() == rejecting ? 16 : 64;
  auto group = EngineGroup::Create(o, parallel, ::llm::testing::MpiTestEnvironment::runtime());
  ASSERT_TRUE(group.ok()) << group.status();
  // The test's own world (another abort channel than the group's) times everything from here.
  ASSERT_TRUE(test_world.Barrier().ok());
  const absl::Time start = absl::Now();
  if (!(*group)->is_scheduler()) {
    const absl::Status s = (*group)->RunWorker();
    EXPECT_FALSE(s.ok());
    if (test_world.rank() == rejecting) {
      EXPECT_NE(s.message().find("outside the limits"), absl::string_view::npos) << s;
    } else {
      EXPECT_EQ(s.code(), absl::StatusCode::kAborted) << s;
      EXPECT_NE(s.message().find(absl::StrCat("rank ", rejecting, " failed a step")), absl::string_view::npos) << s;
    }
    EXPECT_LT(absl::Now() - start, absl::Seconds(1)) << "rank " << test_world.rank() << " waited for the group";
  } else {
    Engine& engine = *(*group)->engine();
    std::mutex mu;
    std::condition_variable cv;
    std::optional<RequestOutput> last;
    GenerateRequest r;
    for (int i = 0; i < 40; ++i) r.prompt_tokens.push_back(1 + i);  // one 40-token prefill
    r.stop.max_tokens = 4;
    r.detokenize = false;
    ASSERT_TRUE(engine
                    .Submit(r,
                            [&](RequestOutput out) {
                              if (!out.finished) return;
                              std::lock_guard<std::mutex> lock(mu);
                              last = std::move(out);
                              cv.notify_all();
                            })
                    .ok());
    {
      std::unique_lock<std::mutex> lock(mu);
      ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(30), [&] { return last.has_value(); }));
    }
    EXPECT_LT(absl::Now() - start, absl::Seconds(1)) << "the failed step took the communicators' deadline";
    EXPECT_EQ(last->finish_reason, FinishReason::kError);
    EXPECT_NE(last->status.message().find(absl::StrCat("rank ", rejecting, " failed a step")),
              absl::string_view::npos)
        << last->status;
    EXPECT_NE(last->status.message().find("outside the limits"), absl::string_view::npos) << last->status;
    // The group's communicators are over: the engine says so, and takes nothing more.
    EXPECT_TRUE(engine.failed());
    EXPECT_EQ(engine.Submit(r, [](RequestOutput) {}).status().code(), absl::StatusCode::kUnavailable);
    engine.Shutdown(false);
  }
  group->reset();
  EXPECT_TRUE(test_world.Barrier().ok()) << "every rank is out of the group";
}

}  // namespace
}  // namespace llm
