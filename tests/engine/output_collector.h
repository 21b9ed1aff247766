// Test helper: gathers every request's outputs from the engine's callbacks (any thread).
#pragma once

#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "engine/distributed/deployment.h"
#include "engine/request.h"
#include "gtest/gtest.h"

namespace llm::testing {

// Gathers every request's outputs; Wait() blocks until `n` requests have finished.
class Collector {
 public:
  OutputCallback Callback() {
    return [this](RequestOutput out) {
      std::lock_guard<std::mutex> lock(mu_);
      Result& r = results_[out.id];
      if (r.done) r.output_after_final = true;
      r.tokens.insert(r.tokens.end(), out.token_ids.begin(), out.token_ids.end());
      r.text += out.text;
      r.logprobs.insert(r.logprobs.end(), out.logprobs.begin(), out.logprobs.end());
      ++r.updates;
      if (out.finished) {
        r.final = out;
        r.done = true;
        ++finished_;
        cv_.notify_all();
      }
    };
  }
  void Wait(int n) {
    std::unique_lock<std::mutex> lock(mu_);
    ASSERT_TRUE(cv_.wait_for(lock, std::chrono::seconds(120), [&] { return finished_ >= n; }))
        << finished_ << " of " << n << " finished";
  }
  struct Result {
    std::vector<int32_t> tokens;
    std::string text;                    // the streamed text, concatenated
    std::vector<SampleResult> logprobs;
    RequestOutput final;
    bool done = false;
    bool output_after_final = false;  // a contract violation: the final output is the last
    int updates = 0;
  };
  Result Get(RequestId id) {
    std::lock_guard<std::mutex> lock(mu_);
    return results_[id];
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<RequestId, Result> results_;
  int finished_ = 0;
};

// A single-process deployment (a group of one), as `llm serve` without mpirun builds it.
inline absl::StatusOr<std::unique_ptr<Deployment>> DeployLocal(const EngineBuildOptions& options) {
  return Deployment::Create(options, ParallelOptions{});
}

}  // namespace llm::testing
