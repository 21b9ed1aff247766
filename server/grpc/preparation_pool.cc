#include "server/grpc/preparation_pool.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace llm::server {

PreparationPool::PreparationPool(int threads, int max_jobs, size_t max_bytes)
    : max_jobs_(std::max(1, max_jobs)), max_bytes_(max_bytes) {
  for (int i = 0; i < std::max(1, threads); ++i) threads_.emplace_back([this] { Run(); });
}

PreparationPool::~PreparationPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (std::thread& t : threads_) t.join();
}

absl::Status PreparationPool::Submit(size_t bytes, std::function<void()> job) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    const bool full = static_cast<int>(queue_.size()) >= max_jobs_ ||
                      (queued_bytes_ > 0 && queued_bytes_ + bytes > max_bytes_);
    if (full || stop_)
      return absl::ResourceExhaustedError(absl::StrCat(
          "the server is busy preparing other requests (", queue_.size(), " queued, ", queued_bytes_ >> 20,
          " MiB of input); retry later"));
    queued_bytes_ += bytes;
    queue_.push_back({bytes, std::move(job)});
  }
  cv_.notify_one();
  return absl::OkStatus();
}

void PreparationPool::Run() {
  for (;;) {
    Job job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping with nothing left
      job = std::move(queue_.front());
      queue_.pop_front();
    }
    job.run();
    std::lock_guard<std::mutex> lock(mu_);
    queued_bytes_ -= job.bytes;
  }
}

}  // namespace llm::server
