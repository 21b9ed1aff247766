// Input work is bounded, so huge prompts never starve the server: 64 concurrent 4 MB text prompts
// are refused by their size alone (they cannot fit the context; nothing tokenizes them) while
// health checks, over gRPC and HTTP, keep answering within 100 ms and a small request beside them
// completes.
#include <algorithm>
#include <atomic>
#include <thread>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/server/server_process.h"

namespace llm::testing {
namespace {

TEST(BoundedInputTest, SixtyFourHugePromptsKeepHealthUnderAHundredMilliseconds) {
  auto server = ServerProcess::Start({"--model", TokenizerModelDir(), "--threads", "1"});
  ASSERT_NE(server, nullptr);
  std::string huge;
  while (huge.size() < 4'000'000) huge += "the quick brown fox jumps over the lazy dog ";
  huge.resize(4'000'000);

  std::atomic<bool> stop{false};
  std::atomic<int> probes{0};
  absl::Duration worst = absl::ZeroDuration();
  // A health checker has a connection of its own, as each client has.
  const std::shared_ptr<grpc::Channel> checker = server->NewChannel();
  ASSERT_EQ(server->Health(checker), grpc::health::v1::HealthCheckResponse::SERVING);
  std::thread health([&] {
    for (int i = 0; !stop.load(); ++i) {
      const absl::Time start = absl::Now();
      const bool ok = i % 2 == 0 ? server->Health(checker) == grpc::health::v1::HealthCheckResponse::SERVING
                                 : server->HttpHealthy();
      worst = std::max(worst, absl::Now() - start);
      EXPECT_TRUE(ok);
      probes.fetch_add(1);
      absl::SleepFor(absl::Milliseconds(5));
    }
  });
  std::vector<grpc::Status> statuses(64);
  std::vector<std::thread> clients;
  const absl::Time flood = absl::Now();
  for (int i = 0; i < 64; ++i)
    clients.emplace_back([&, i] {
      auto stub = v1::Llm::NewStub(server->NewChannel());
      v1::GenerateRequest r;
      r.set_text(huge);
      r.mutable_stopping()->set_max_tokens(16);
      statuses[i] = Complete(*stub, r, absl::Seconds(120)).status;
    });
  // A small request among them is served as usual.
  auto stub = server->NewStub();
  const CallResult small = Complete(*stub, GreedyIds({1, 2, 3}, 8));
  for (std::thread& t : clients) t.join();
  const absl::Duration flood_time = absl::Now() - flood;
  stop = true;
  health.join();
  EXPECT_TRUE(small.status.ok()) << small.status.error_message();
  for (const grpc::Status& s : statuses) {
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
    EXPECT_NE(s.error_message().find("cannot fit the context length 512"), std::string::npos) << s.error_message();
  }
  EXPECT_GE(probes.load(), 4);
  EXPECT_LT(worst, absl::Milliseconds(100)) << "the worst health check while 64 prompts of 4 MB arrived";
  std::printf("[ bounded input ] 64 x 4 MB prompts refused in %.0f ms; %d health probes, the slowest %.1f ms\n",
              absl::ToDoubleMilliseconds(flood_time), probes.load(), absl::ToDoubleMilliseconds(worst));
}

}  // namespace
}  // namespace llm::testing
