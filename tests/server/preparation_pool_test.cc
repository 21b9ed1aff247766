// PreparationPool: jobs run on its threads; a full queue (by jobs or by input bytes) refuses new
// work at once with RESOURCE_EXHAUSTED, and takes work again once it drains; queued work runs
// before the pool is destroyed.
#include "server/grpc/preparation_pool.h"

#include <atomic>
#include <condition_variable>
#include <mutex>

#include "gtest/gtest.h"

namespace llm::server {
namespace {

// Holds the pool's only thread until released.
class Gate {
 public:
  void Wait() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return open_; });
  }
  void Open() {
    std::lock_guard<std::mutex> lock(mu_);
    open_ = true;
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = false;
};

TEST(PreparationPoolTest, FullQueueRefusesAtOnceAndDrains) {
  std::atomic<int> ran{0};
  Gate gate;
  {
    PreparationPool pool(/*threads=*/1, /*max_jobs=*/2, /*max_bytes=*/1000);
    ASSERT_TRUE(pool.Submit(10, [&] {
      gate.Wait();
      ++ran;
    }).ok());
    // The first job may still be queued or already running: fill what is left by jobs.
    absl::Status s;
    int accepted = 1;
    while ((s = pool.Submit(10, [&] { ++ran; })).ok()) ++accepted;
    EXPECT_LE(accepted, 3);
    EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
    EXPECT_NE(s.message().find("busy preparing other requests"), absl::string_view::npos) << s;
    gate.Open();
    while (ran.load() < accepted) absl::SleepFor(absl::Milliseconds(1));
    EXPECT_TRUE(pool.Submit(10, [&] { ++ran; }).ok()) << "drained: takes work again";
  }
  EXPECT_GE(ran.load(), 3);
}

TEST(PreparationPoolTest, InputBytesBoundTheQueue) {
  Gate gate;
  PreparationPool pool(/*threads=*/1, /*max_jobs=*/100, /*max_bytes=*/1000);
  ASSERT_TRUE(pool.Submit(600, [&] { gate.Wait(); }).ok());
  EXPECT_EQ(pool.Submit(600, [] {}).code(), absl::StatusCode::kResourceExhausted) << "1200 bytes over 1000";
  EXPECT_TRUE(pool.Submit(300, [] {}).ok());
  gate.Open();
}

TEST(PreparationPoolTest, OneJobLargerThanTheLimitRunsAlone) {
  std::atomic<bool> ran{false};
  {
    PreparationPool pool(1, 10, 100);
    EXPECT_TRUE(pool.Submit(5000, [&] { ran = true; }).ok());
  }
  EXPECT_TRUE(ran.load()) << "queued work runs before the pool goes";
}

}  // namespace
}  // namespace llm::server
