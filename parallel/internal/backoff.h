// Internal: the polling pace shared by every deadline loop in parallel/.
#pragma once

#include <chrono>
#include <thread>

namespace llm::internal {

// Spin first (a decode-step collective completes in microseconds), then yield, then sleep so
// that oversubscribed ranks leave the cores to the peers they are waiting for.
inline void Backoff(int iteration) {
  if (iteration < 64) return;
  if (iteration < 1024) {
    std::this_thread::yield();
    return;
  }
  std::this_thread::sleep_for(iteration < 4096 ? std::chrono::microseconds(50)
                                               : std::chrono::microseconds(500));
}

}  // namespace llm::internal
