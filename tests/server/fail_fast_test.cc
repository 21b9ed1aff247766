// Where survival is impossible, `mpirun ... llm serve` fails fast: ranks started with different
// settings refuse to start, naming the first setting that differs (exit 2); a wrong number of
// ranks is a usage error (exit 2); a rank that stalls a collective past --comm-timeout-s breaks
// the group's communicators, which fails the step on every rank, flips health to NOT_SERVING and
// ends the job with a non-zero status (so a supervisor restarts it).
#include <signal.h>
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "tests/runtime/fixture_reference.h"
#include "tests/server/server_process.h"

namespace llm::testing {
namespace {

struct Outcome {
  int exit_code = -1;
  std::string output;  // stdout and stderr
};

Outcome RunCommand(const std::string& command) {
  Outcome o;
  FILE* p = popen((command + " 2>&1").c_str(), "r");
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) o.output.append(buf, n);
  const int status = pclose(p);
  o.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return o;
}

std::string Llm() { return absl::StrCat(LLM_BINARY_DIR, "/bin/llm"); }

// `mpirun` with one rank per entry of `rank_args` (MPMD): rank r runs `llm serve <rank_args[r]>`.
std::string MpmdServe(const std::vector<std::string>& rank_args) {
  std::string command = absl::StrCat(MpirunPrefix(1).substr(0, MpirunPrefix(1).find(" -np")),
                                     " -x OMPI_MCA_btl_vader_single_copy_mechanism=none");
  for (size_t r = 0; r < rank_args.size(); ++r)
    absl::StrAppend(&command, r == 0 ? " " : " : ", "-np 1 ", Llm(),
                    " serve --port 0 --http-port -1 --threads 1 --tp 2 ", rank_args[r]);
  return command;
}

TEST(FailFastTest, RanksWithDifferentSettingsRefuseToStartNamingTheSetting) {
  const std::string model = ModelDir("llama-tiny");
  Outcome o = RunCommand(MpmdServe({"--model " + model + " --max-context 256", "--model " + model + " --max-context 128"}));
  EXPECT_EQ(o.exit_code, 2) << o.output;
  EXPECT_NE(o.output.find("the ranks were started with different settings: --max-context is '256' on rank 0 but "
                          "'128' on rank 1"),
            std::string::npos)
      << o.output;
  EXPECT_EQ(o.output.find("llm serve: serving"), std::string::npos) << "nothing serves";

  // Another model on one rank: named by the model file that differs.
  o = RunCommand(MpmdServe({"--model " + model, "--model " + ModelDir("llama-tiny-sharded")}));
  EXPECT_EQ(o.exit_code, 2) << o.output;
  EXPECT_NE(o.output.find("the ranks were started with different settings: model"), std::string::npos) << o.output;
}

TEST(FailFastTest, WrongNumberOfRanksIsAUsageError) {
  const Outcome o = RunCommand(absl::StrCat(MpirunPrefix(2), " ", Llm(), " serve --port 0 --http-port -1 --model ",
                                     ModelDir("llama-tiny"), " --tp 1"));
  EXPECT_EQ(o.exit_code, 2) << o.output;
  EXPECT_NE(o.output.find("launched with 2 ranks but --tp 1 x --pp 1 needs 1 (mpirun -np 1)"), std::string::npos)
      << o.output;
}

// World rank `rank` of an `mpirun` server: a child of mpirun with that OMPI_COMM_WORLD_RANK.
pid_t MpiRank(const ServerProcess& server, int rank) {
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    int pid = 0;
    if (!absl::SimpleAtoi(entry.path().filename().string(), &pid)) continue;
    std::ifstream stat(entry.path() / "stat");
    std::string line((std::istreambuf_iterator<char>(stat)), {});
    const size_t close = line.rfind(')');
    int ppid = 0;
    char state = 0;
    if (close == std::string::npos || std::sscanf(line.c_str() + close + 1, " %c %d", &state, &ppid) != 2 ||
        ppid != server.pid())
      continue;
    std::ifstream env(entry.path() / "environ");
    std::string vars((std::istreambuf_iterator<char>(env)), {});
    for (absl::string_view var : absl::StrSplit(vars, '\0'))
      if (var == absl::StrCat("OMPI_COMM_WORLD_RANK=", rank)) return pid;
  }
  return -1;
}

TEST(FailFastTest, StalledCollectiveBreaksTheGroupFlipsHealthAndEndsTheJob) {
  auto server = ServerProcess::StartMpi(2, {"--model", ModelDir("llama-tiny"), "--tp", "2", "--comm-timeout-s", "2"});
  ASSERT_NE(server, nullptr);
  auto stub = server->NewStub();
  ASSERT_TRUE(Complete(*stub, GreedyIds({1, 2, 3}, 4)).status.ok());
  const pid_t rank1 = MpiRank(*server, 1);
  ASSERT_GT(rank1, 0);
  kill(rank1, SIGSTOP);
  const absl::Time start = absl::Now();
  const CallResult failed = Complete(*stub, GreedyIds({1, 2, 3}, 4), absl::Seconds(30));
  EXPECT_FALSE(failed.status.ok());
  EXPECT_NE(failed.status.error_message().find("did not complete within 2s"), std::string::npos)
      << failed.status.error_message();
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  // Health says so until the process ends; then the job ends with a non-zero status.
  bool not_serving = false;
  WaitFor([&] { return not_serving = server->Health() != grpc::health::v1::HealthCheckResponse::SERVING; },
          absl::Seconds(10));
  EXPECT_TRUE(not_serving);
  kill(rank1, SIGCONT);
  const int code = server->WaitForExit(absl::Seconds(30));
  EXPECT_NE(code, 0);
  EXPECT_NE(server->Log().find("the engine cannot serve any more"), std::string::npos) << server->Log();
}

}  // namespace
}  // namespace llm::testing
