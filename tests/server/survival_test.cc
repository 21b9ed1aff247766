// A front end that outlives its workers (`llm serve --workers "mpirun -np N"`), end to end: a
// dozen seeded streams run while one worker rank is killed (SIGKILL), and again while one hangs
// (SIGSTOP, past the watchdog). Every stream completes with exactly the token ids and text of an
// undisturbed run, new requests succeed after the restart, at TP2, PP2 and TP2 x PP2. Two
// replicas with one killed under load lose no request and health stays SERVING; a replica that
// keeps dying backs off, then fails its requests with UNAVAILABLE and the front end exits.
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <functional>
#include <mutex>
#include <thread>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/server/server_process.h"

namespace llm::testing {
namespace {

constexpr int kStreams = 12;
constexpr int kWatchdogSeconds = 3;

std::vector<int32_t> Prompt(int length, int salt) {
  std::vector<int32_t> prompt(length);
  for (int j = 0; j < length; ++j) prompt[j] = (salt * 37 + j * 11 + 5) % 383;
  return prompt;
}

// Seeded sampling (the draw depends on seed and step alone), some with penalties, which count
// the pending token of an overlapped step on every rank.
std::vector<v1::GenerateRequest> SeededStreams(int max_tokens) {
  std::vector<v1::GenerateRequest> requests;
  for (int i = 0; i < kStreams; ++i) {
    v1::GenerateRequest r;
    const std::vector<int32_t> prompt = Prompt(12 + 5 * i, i);
    r.mutable_token_ids()->mutable_ids()->Add(prompt.begin(), prompt.end());
    v1::SamplingParams* s = r.mutable_sampling();
    s->set_temperature(0.9f);
    s->set_top_k(50);
    s->set_top_p(0.95f);
    s->set_seed(7000 + i);
    if (i % 4 == 1) {
      s->set_repetition_penalty(1.3f);
      s->set_presence_penalty(0.5f);
    }
    r.mutable_stopping()->set_max_tokens(max_tokens + 8 * (i % 3));
    r.mutable_stopping()->set_ignore_eos(true);
    requests.push_back(std::move(r));
  }
  return requests;
}

// Every request streamed at once. `on_received(total)` is called by the reading thread as each
// part arrives, with the tokens received so far over all streams; `arrivals` records when each
// part came (for the recovery time).
struct StreamRun {
  std::vector<CallResult> results;
  std::vector<absl::Time> arrivals;
};

StreamRun StreamAll(const ServerProcess& server, const std::vector<v1::GenerateRequest>& requests,
                    const std::function<void(int)>& on_received = nullptr) {
  StreamRun run;
  run.results.resize(requests.size());
  std::mutex mu;
  std::atomic<int> received{0};
  std::vector<std::thread> threads;
  for (size_t i = 0; i < requests.size(); ++i)
    threads.emplace_back([&, i] {
      auto stub = server.NewStub();
      grpc::ClientContext context;
      context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(120)));
      auto reader = stub->Generate(&context, requests[i]);
      v1::GenerateResponse part;
      CallResult& result = run.results[i];
      while (reader->Read(&part)) {
        {
          std::lock_guard<std::mutex> lock(mu);
          run.arrivals.push_back(absl::Now());
        }
        const int total = received.fetch_add(part.token_ids_size()) + part.token_ids_size();
        if (on_received) on_received(total);
        result.merged.mutable_token_ids()->Add(part.token_ids().begin(), part.token_ids().end());
        result.merged.mutable_text()->append(part.text());
        if (part.finish_reason() != v1::FINISH_REASON_UNSPECIFIED) result.merged.set_finish_reason(part.finish_reason());
      }
      result.status = reader->Finish();
    });
  for (std::thread& t : threads) t.join();
  return run;
}

// From a disruption to the first token after it: the end of the longest silence that follows it
// (tokens already on their way may still arrive just after the disruption).
absl::Duration RecoveryTime(std::vector<absl::Time> arrivals, absl::Time disrupted) {
  std::sort(arrivals.begin(), arrivals.end());
  absl::Time previous = disrupted, resumed = disrupted;
  absl::Duration longest = absl::ZeroDuration();
  for (absl::Time t : arrivals) {
    if (t < disrupted) continue;
    if (t - previous > longest) {
      longest = t - previous;
      resumed = t;
    }
    previous = t;
  }
  return resumed - disrupted;
}

void ExpectSameAsUndisturbed(const StreamRun& disturbed, const StreamRun& reference, const char* what) {
  for (int i = 0; i < kStreams; ++i) {
    SCOPED_TRACE(absl::StrCat(what, ": stream ", i));
    ASSERT_TRUE(disturbed.results[i].status.ok()) << disturbed.results[i].status.error_message();
    EXPECT_EQ(Ids(disturbed.results[i].merged), Ids(reference.results[i].merged));
    EXPECT_EQ(disturbed.results[i].merged.text(), reference.results[i].merged.text());
    EXPECT_EQ(disturbed.results[i].merged.finish_reason(), v1::FINISH_REASON_LENGTH);
  }
}

// Runs the streams and, once they have about 8 tokens each, sends `sig` to world rank `rank` of
// replica 0's group. Returns the run and the time from the signal to the first resumed token.
// The signal goes from the reading thread that sees the threshold crossed, at once: a separate
// thread polling the count could be scheduled late on a loaded machine, after the streams ended,
// and the disruption would then test nothing (checked below).
std::pair<StreamRun, absl::Duration> StreamWhileDisrupting(const ServerProcess& server,
                                                     const std::vector<v1::GenerateRequest>& requests, int rank,
                                                     int sig) {
  const std::map<int, pid_t> ranks = server.WorkerRanks(0);
  const auto target = ranks.find(rank);
  if (target == ranks.end()) {
    ADD_FAILURE() << "no worker rank " << rank;
    return {};
  }
  std::atomic<bool> fired{false};
  absl::Time disrupted = absl::InfiniteFuture();  // written once, read after the readers joined
  StreamRun run = StreamAll(server, requests, [&](int total) {
    if (total < kStreams * 8 || fired.exchange(true)) return;
    disrupted = absl::Now();
    kill(target->second, sig);
  });
  EXPECT_NE(disrupted, absl::InfiniteFuture()) << "the streams ended before the disruption";
  EXPECT_TRUE(std::any_of(run.arrivals.begin(), run.arrivals.end(), [&](absl::Time t) { return t > disrupted; }))
      << "every token arrived before the disruption: it disturbed no running stream";
  const absl::Duration recovery = RecoveryTime(run.arrivals, disrupted);
  return {std::move(run), recovery};
}

struct Layout {
  int tp, pp;
};

class SurvivalTest : public ::testing::TestWithParam<Layout> {};

TEST_P(SurvivalTest, KilledOrHungRankResumesEveryStreamExactly) {
  const Layout layout = GetParam();
  const int ranks = layout.tp * layout.pp;
  auto server = ServerProcess::Start({"--model", TokenizerModelDir(), "--threads", "1", "--tp",
                                      std::to_string(layout.tp), "--pp", std::to_string(layout.pp), "--workers",
                                      MpirunPrefix(ranks), "--worker-timeout-s", std::to_string(kWatchdogSeconds),
                                      "--max-seqs", "16"});
  ASSERT_NE(server, nullptr);
  const std::vector<v1::GenerateRequest> requests = SeededStreams(72);
  const StreamRun reference = StreamAll(*server, requests);
  for (const CallResult& r : reference.results) ASSERT_TRUE(r.status.ok()) << r.status.error_message();

  // A dead rank: the job ends, the front end sees its connection close (or the launcher end).
  const std::map<int, pid_t> first_group = server->WorkerRanks(0);
  auto [killed, kill_recovery] = StreamWhileDisrupting(*server, requests, ranks - 1, SIGKILL);
  ExpectSameAsUndisturbed(killed, reference, "SIGKILL");
  std::printf("[ recovery ] tp %d pp %d: SIGKILL of rank %d -> first resumed token after %.0f ms\n", layout.tp,
              layout.pp, ranks - 1, absl::ToDoubleMilliseconds(kill_recovery));

  // A hung rank: nothing closes; the watchdog replaces the group after its deadline.
  // The next disruption must hit the new group: every rank up, none left of the killed one (whose
  // ranks may take a moment to go on a loaded machine).
  ASSERT_TRUE(WaitFor(
      [&] {
        const std::map<int, pid_t> now = server->WorkerRanks(0);
        if (now.size() != static_cast<size_t>(ranks)) return false;
        for (const auto& [rank, pid] : now)
          for (const auto& [old_rank, old_pid] : first_group)
            if (pid == old_pid) return false;
        return server->Metric("llm_replicas_serving") == 1;
      },
      absl::Seconds(30)));
  auto [hung, hang_recovery] = StreamWhileDisrupting(*server, requests, 1 % ranks, SIGSTOP);
  ExpectSameAsUndisturbed(hung, reference, "SIGSTOP");
  EXPECT_GE(hang_recovery, absl::Seconds(kWatchdogSeconds) - absl::Milliseconds(100));
  std::printf("[ recovery ] tp %d pp %d: SIGSTOP of rank %d -> first resumed token after %.0f ms (watchdog %d s)\n",
              layout.tp, layout.pp, 1 % ranks, absl::ToDoubleMilliseconds(hang_recovery), kWatchdogSeconds);

  // New requests run on the new group.
  auto stub = server->NewStub();
  const CallResult after = Complete(*stub, requests[0]);
  ASSERT_TRUE(after.status.ok()) << after.status.error_message();
  EXPECT_EQ(Ids(after.merged), Ids(reference.results[0].merged));
  EXPECT_EQ(server->Metric("llm_worker_recoveries_total"), 2);
  EXPECT_EQ(server->Metric("llm_replicas_serving"), 1);
  // gRPC health follows the engine's state on the front end's 100 ms watch.
  EXPECT_TRUE(WaitFor([&] { return server->Health() == grpc::health::v1::HealthCheckResponse::SERVING; },
                      absl::Seconds(2)));
}

std::string LayoutName(const ::testing::TestParamInfo<Layout>& info) {
  return absl::StrCat("tp", info.param.tp, "_pp", info.param.pp);
}

INSTANTIATE_TEST_SUITE_P(Layouts, SurvivalTest, ::testing::Values(Layout{2, 1}, Layout{1, 2}, Layout{2, 2}),
                         LayoutName);

// Two replicas, one killed under load: its requests wait for its new group while the other
// replica takes the new ones; no request fails and health never leaves SERVING.
TEST(ReplicaTest, OneReplicaKilledUnderLoadLosesNothingAndHealthStaysServing) {
  auto server = ServerProcess::Start({"--model", TokenizerModelDir(), "--threads", "1", "--workers", "",
                                      "--replicas", "2", "--worker-timeout-s", std::to_string(kWatchdogSeconds)});
  ASSERT_NE(server, nullptr);
  const std::vector<v1::GenerateRequest> requests = SeededStreams(64);
  const StreamRun reference = StreamAll(*server, requests);
  std::atomic<bool> stop{false};
  std::atomic<int> probes{0}, not_serving{0};
  std::thread health([&] {
    while (!stop.load()) {
      if (server->Health() != grpc::health::v1::HealthCheckResponse::SERVING) not_serving.fetch_add(1);
      probes.fetch_add(1);
      absl::SleepFor(absl::Milliseconds(10));
    }
  });
  // Two waves of the dozen, the second sent while replica 0's group is being replaced.
  StreamRun first, second;
  std::thread later([&] {
    ASSERT_TRUE(WaitFor([&] { return server->WorkerRanks(0).empty() || server->Metric("llm_replicas_serving") < 2; },
                        absl::Seconds(60)));
    second = StreamAll(*server, requests);
  });
  std::tie(first, std::ignore) = StreamWhileDisrupting(*server, requests, 0, SIGKILL);
  later.join();
  stop = true;
  health.join();
  ExpectSameAsUndisturbed(first, reference, "first wave");
  ExpectSameAsUndisturbed(second, reference, "second wave");
  EXPECT_GT(probes.load(), 20);
  EXPECT_EQ(not_serving.load(), 0) << "health left SERVING while one replica restarted";
  EXPECT_EQ(server->Metric("llm_worker_recoveries_total"), 1);
  EXPECT_EQ(server->Metric("llm_replicas"), 2);
  EXPECT_EQ(server->Metric("llm_requests_finished_total{finish_reason=\"error\"}"), 0);
}

// Requests that share a prompt prefix go to the replica that computed it (its KV cache holds it),
// not round the least loaded: after one request, four sent at once all find the prefix cached.
TEST(ReplicaTest, SharedPrefixesGoToTheReplicaThatHasThem) {
  auto server = ServerProcess::Start({"--model", TokenizerModelDir(), "--threads", "1", "--workers", "",
                                      "--replicas", "2"});
  ASSERT_NE(server, nullptr);
  auto request = [](int tail) {
    v1::GenerateRequest r;
    std::vector<int32_t> prompt = Prompt(64, 3);  // 4 blocks of 16 shared
    prompt.push_back(100 + tail);
    r.mutable_token_ids()->mutable_ids()->Add(prompt.begin(), prompt.end());
    r.mutable_stopping()->set_max_tokens(24);
    r.mutable_stopping()->set_ignore_eos(true);
    return r;
  };
  auto stub = server->NewStub();
  ASSERT_TRUE(Complete(*stub, request(0)).status.ok());
  std::vector<v1::GenerateRequest> wave;
  for (int i = 1; i <= 4; ++i) wave.push_back(request(i));
  std::atomic<int> cached{0};
  std::vector<std::thread> threads;
  for (const v1::GenerateRequest& r : wave)
    threads.emplace_back([&, r] {
      auto own = server->NewStub();
      const CallResult result = Complete(*own, r);
      EXPECT_TRUE(result.status.ok()) << result.status.error_message();
      cached.fetch_add(result.merged.usage().cached_prompt_tokens());
    });
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(cached.load(), 4 * 64) << "each of the four reads the 64-token prefix from the cache";
}

// A group that dies again each time it comes back: restarts back off, then the replica gives up,
// its requests end with UNAVAILABLE saying why, health turns NOT_SERVING and the front end exits 1.
TEST(RepeatedCrashTest, BacksOffThenFailsWithUnavailableAndExits) {
  // Two sequences at a time: the dozen queue for seconds, longer than the restarts take.
  auto server = ServerProcess::Start({"--model", TokenizerModelDir(), "--threads", "1", "--workers", "",
                                      "--worker-restarts", "2", "--max-seqs", "2"});
  ASSERT_NE(server, nullptr);
  std::vector<v1::GenerateRequest> requests = SeededStreams(400);
  std::thread killer([&] {
    // Kill every group as soon as it is up: the first loss restarts at once, the next after 1 s.
    for (int generation = 0; generation < 3; ++generation) {
      std::map<int, pid_t> ranks;
      if (!WaitFor([&] { return !(ranks = server->WorkerRanks(0)).empty(); }, absl::Seconds(30))) return;
      absl::SleepFor(absl::Milliseconds(100));
      kill(ranks.begin()->second, SIGKILL);
      WaitFor([&] { return server->WorkerRanks(0) != ranks; }, absl::Seconds(30));
    }
  });
  const StreamRun run = StreamAll(*server, requests);
  killer.join();
  int unavailable = 0;
  for (const CallResult& r : run.results) {
    if (r.status.ok()) continue;  // finished before the replica gave up
    ++unavailable;
    EXPECT_EQ(r.status.error_code(), grpc::StatusCode::UNAVAILABLE) << r.status.error_message();
    EXPECT_NE(r.status.error_message().find("failed 2 restarts in a row; giving up"), std::string::npos)
        << r.status.error_message();
  }
  EXPECT_GE(unavailable, kStreams / 2) << "the queued requests waited for the restarts, then failed";
  EXPECT_EQ(server->WaitForExit(absl::Seconds(30)), 1);
  const std::string log = server->Log();
  EXPECT_NE(log.find("waiting 1s first"), std::string::npos) << log;
  EXPECT_NE(log.find("health NOT_SERVING"), std::string::npos) << log;
}

}  // namespace
}  // namespace llm::testing
