// Input work is bounded, so huge prompts never starve the server: 64 concurrent 4 MB text prompts
// are refused by their size alone (they cannot fit the context; nothing tokenizes them) while
// health checks, over gRPC and HTTP, keep answering within 250 ms and a small request beside them
// completes. The prompts come from a child process at the lowest CPU priority: on a 2-core test
// machine the senders (64 threads serializing and copying 256 MB) would otherwise take the CPU from
// the server under test, which remote clients never do.
#include <stdio.h>
#include <stdlib.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <filesystem>
#include <thread>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/server/server_process.h"

namespace llm::testing {
namespace {

TEST(BoundedInputTest, SixtyFourHugePromptsKeepHealthAnswering) {
  auto server = ServerProcess::Start({"--model", TokenizerModelDir(), "--threads", "1"});
  ASSERT_NE(server, nullptr);
  std::string huge;
  while (huge.size() < 4'000'000) huge += "the quick brown fox jumps over the lazy dog ";
  huge.resize(4'000'000);

  std::vector<std::string> flood_lines;
  std::atomic<bool> stop{false};
  std::atomic<int> probes{0};
  absl::Duration worst = absl::ZeroDuration(), worst_grpc = absl::ZeroDuration();
  // A health checker has a connection of its own, as each client has.
  const std::shared_ptr<grpc::Channel> checker = server->NewChannel();
  ASSERT_EQ(server->Health(checker), grpc::health::v1::HealthCheckResponse::SERVING);
  std::thread health([&] {
    for (int i = 0; !stop.load(); ++i) {
      const absl::Time start = absl::Now();
      const bool ok = i % 2 == 0 ? server->Health(checker) == grpc::health::v1::HealthCheckResponse::SERVING
                                 : server->HttpHealthy();
      worst = std::max(worst, absl::Now() - start);
      if (i % 2 == 0) worst_grpc = std::max(worst_grpc, absl::Now() - start);
      EXPECT_TRUE(ok);
      probes.fetch_add(1);
      absl::SleepFor(absl::Milliseconds(5));
    }
  });
  // The flood: 64 prompts at once from a child process (BoundedInputFlood below) at nice 19,
  // each status reported on a line of its own.
  const absl::Time flood = absl::Now();
  const std::string command = absl::StrCat("LLM_FLOOD_ADDRESS=", server->address(), " nice -n 19 ",
                                           std::filesystem::read_symlink("/proc/self/exe").string(),
                                           " --gtest_also_run_disabled_tests",
                                           " --gtest_filter=BoundedInputFlood.DISABLED_SendHugePrompts");
  FILE* child = popen(command.c_str(), "r");
  ASSERT_NE(child, nullptr);
  std::thread reader([&] {
    char line[4096];
    while (fgets(line, sizeof(line), child) != nullptr)
      if (std::strncmp(line, "status ", 7) == 0) flood_lines.push_back(line + 7);
  });
  // A small request among them is served as usual.
  auto stub = server->NewStub();
  const CallResult small = Complete(*stub, GreedyIds({1, 2, 3}, 8));
  reader.join();
  EXPECT_EQ(pclose(child), 0);
  const absl::Duration flood_time = absl::Now() - flood;
  stop = true;
  health.join();
  EXPECT_TRUE(small.status.ok()) << small.status.error_message();
  ASSERT_EQ(flood_lines.size(), 64u);
  for (const std::string& line : flood_lines) {
    EXPECT_EQ(line.rfind(absl::StrCat(grpc::StatusCode::INVALID_ARGUMENT, " "), 0), 0u) << line;
    EXPECT_NE(line.find("cannot fit the context length 512"), std::string::npos) << line;
  }
  EXPECT_GE(probes.load(), 4);
  // 250 ms: on the 2-core CI machine the slowest probe measured 44-114 ms (the flood's 256 MB
  // arriving on the same cores); a health check queued behind the prompts' reading or tokenizing
  // would take the flood's whole 1.7-1.8 s.
  EXPECT_LT(worst, absl::Milliseconds(250)) << "the worst health check while 64 prompts of 4 MB arrived";
  std::printf("[ bounded input ] 64 x 4 MB prompts refused in %.0f ms; %d health probes, the slowest %.1f ms (gRPC %.1f ms)\n",
              absl::ToDoubleMilliseconds(flood_time), probes.load(), absl::ToDoubleMilliseconds(worst),
              absl::ToDoubleMilliseconds(worst_grpc));
}

// The child's part: LLM_FLOOD_ADDRESS's server gets 64 text prompts of 4 MB at once, each on a
// connection of its own; prints "status CODE MESSAGE" for each.
TEST(BoundedInputFlood, DISABLED_SendHugePrompts) {
  const char* address = std::getenv("LLM_FLOOD_ADDRESS");
  if (address == nullptr) GTEST_SKIP() << "run by BoundedInputTest";
  std::string huge;
  while (huge.size() < 4'000'000) huge += "the quick brown fox jumps over the lazy dog ";
  huge.resize(4'000'000);
  std::vector<grpc::Status> statuses(64);
  std::vector<std::thread> clients;
  for (int i = 0; i < 64; ++i)
    clients.emplace_back([&, i] {
      auto stub = v1::Llm::NewStub(NewClientChannel(address));
      v1::GenerateRequest r;
      r.set_text(huge);
      r.mutable_stopping()->set_max_tokens(16);
      statuses[i] = Complete(*stub, r, absl::Seconds(120)).status;
    });
  for (std::thread& t : clients) t.join();
  for (const grpc::Status& s : statuses) {
    std::string message = s.error_message();
    std::replace(message.begin(), message.end(), '\n', ' ');
    std::printf("status %d %s\n", static_cast<int>(s.error_code()), message.c_str());
  }
}

}  // namespace
}  // namespace llm::testing
