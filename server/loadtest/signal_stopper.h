// SignalStopper: turns SIGINT/SIGTERM into a graceful stop of the load test (stop issuing, cancel
// what is in flight, report what was measured); a second signal exits at once. Construct it
// before any other thread starts (gRPC's included), so that they all inherit the blocked mask.
#pragma once

#include <signal.h>

#include <atomic>
#include <functional>
#include <mutex>
#include <thread>

namespace llm::loadtest {

class SignalStopper {
 public:
  SignalStopper();
  ~SignalStopper();  // unblocks the signals again

  // What the first signal does (replaces the previous action). Thread-safe.
  void OnSignal(std::function<void()> action);
  bool signalled() const { return signalled_.load(); }

 private:
  void Loop();

  sigset_t set_;
  sigset_t old_;
  std::mutex mu_;
  std::function<void()> action_;
  std::atomic<bool> signalled_{false};
  std::atomic<bool> done_{false};
  std::thread thread_;
};

}  // namespace llm::loadtest
