#include "server/loadtest/signal_stopper.h"

#include <unistd.h>

#include <cstdio>
#include <ctime>

namespace llm::loadtest {

SignalStopper::SignalStopper() {
  sigemptyset(&set_);
  sigaddset(&set_, SIGINT);
  sigaddset(&set_, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set_, &old_);
  thread_ = std::thread([this] { Loop(); });
}

SignalStopper::~SignalStopper() {
  done_.store(true);
  thread_.join();
  pthread_sigmask(SIG_SETMASK, &old_, nullptr);
}

void SignalStopper::OnSignal(std::function<void()> action) {
  std::lock_guard<std::mutex> lock(mu_);
  action_ = std::move(action);
}

void SignalStopper::Loop() {
  const timespec poll{0, 100 * 1000 * 1000};
  while (!done_.load()) {
    if (sigtimedwait(&set_, nullptr, &poll) <= 0) continue;
    if (signalled_.exchange(true)) {
      std::fprintf(stderr, "\nllm loadtest: second signal, exiting\n");
      _exit(130);
    }
    std::fprintf(stderr, "\nllm loadtest: stopping (cancelling requests in flight; again to exit at once)\n");
    std::lock_guard<std::mutex> lock(mu_);
    if (action_) action_();
  }
}

}  // namespace llm::loadtest
