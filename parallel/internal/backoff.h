// Internal: the polling pace shared by every deadline loop in parallel/.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace llm::internal {

// How long one wait keeps polling with sched_yield before it sleeps between polls. A rank that
// owns a core can afford to yield through a whole decode step, so that the step message or the
// sampled tokens it waits for are seen within microseconds instead of after a sleep (50 us asked,
// about 100 us with the kernel's timer slack: on every step of a tensor-parallel worker). With
// more ranks than cores, sleeping early leaves the cores to the peers being waited for.
// MpiRuntime sets it at start-up (parallel/mpi_runtime.cc); the default keeps the short window.
inline std::atomic<int64_t>& PollYieldWindowNs() {
  static std::atomic<int64_t> window_ns{1'000'000};
  return window_ns;
}
inline void SetPollYieldWindow(absl::Duration window) {
  PollYieldWindowNs().store(absl::ToInt64Nanoseconds(window), std::memory_order_relaxed);
}

// Spin first (a decode-step collective completes in microseconds), then yield for the window,
// then sleep: 50 us between polls, 500 us once the wait has lasted a second.
inline void Backoff(int iteration, absl::Time wait_start) {
  if (iteration < 64) return;
  const int64_t waited_ns = absl::ToInt64Nanoseconds(absl::Now() - wait_start);
  if (waited_ns < PollYieldWindowNs().load(std::memory_order_relaxed)) {
    std::this_thread::yield();
    return;
  }
  std::this_thread::sleep_for(waited_ns < 1'000'000'000 ? std::chrono::microseconds(50)
                                                        : std::chrono::microseconds(500));
}

}  // namespace llm::internal
