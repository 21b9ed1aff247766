// PreparationPool: the work a request needs before it reaches the engine (parsing an HTTP body,
// rendering a chat template, tokenizing a text prompt), on a few threads of its own with a bounded
// queue. That work grows with the input (a 4 MB prompt is seconds of tokenizing); on gRPC's or the
// HTTP server's threads it would delay every other call, health checks included. Here it waits
// its turn, and a full queue refuses new work at once (RESOURCE_EXHAUSTED, HTTP 429): clients
// back off instead of the server piling up memory and latency.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/status/status.h"

namespace llm::server {

class PreparationPool {
 public:
  // `threads` >= 1. The queue holds at most `max_jobs` jobs and `max_bytes` of their inputs
  // (whatever is more restrictive; one job larger than max_bytes is taken when the queue is empty).
  PreparationPool(int threads, int max_jobs, size_t max_bytes);
  ~PreparationPool();  // runs what is queued, then joins

  // Queues `job`, whose input weighs `bytes`. ResourceExhausted when the queue is full, saying so.
  absl::Status Submit(size_t bytes, std::function<void()> job);

 private:
  struct Job {
    size_t bytes;
    std::function<void()> run;
  };
  void Run();

  const int max_jobs_;
  const size_t max_bytes_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job> queue_;
  size_t queued_bytes_ = 0;  // of queued and running jobs
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace llm::server
