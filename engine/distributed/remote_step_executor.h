// RemoteStepExecutor: the StepExecutor of a front end's engine whose steps run in a worker group
// outside the process (`llm serve --workers`): each Launch sends the step to the group's rank 0,
// each Collect asks for the oldest step's tokens and waits for them, at most the watchdog's
// deadline (WorkerGroupOptions::step_timeout).
//
// When the group fails (its connection closes because rank 0 died or the job was torn down, the
// watchdog expires because a rank hangs, or the group reports a failed step), the executor turns
// unavailable, returns Unavailable from the step, and has its supervisor start a new group; the
// engine keeps every request and recomputes it once the executor is available again
// (engine/engine_core.h). When the supervisor gives up, health() says why and the requests fail.
//
// Per step it costs one write for the launch and one write and one read for the collect, on the
// engine thread: with overlapped steps both happen while the group runs the step before.
#pragma once

#include <atomic>
#include <deque>
#include <memory>
#include <mutex>
#include <string>

#include "absl/status/status.h"
#include "engine/distributed/worker_supervisor.h"
#include "engine/runtime/step_executor.h"

namespace llm {

class RemoteStepExecutor final : public StepExecutor {
 public:
  // Takes the supervisor's first group (connected and checked) and watches it from now on.
  explicit RemoteStepExecutor(std::unique_ptr<WorkerGroupSupervisor> supervisor);
  ~RemoteStepExecutor() override;  // stops the group (kStop), then the supervisor

  absl::Status Launch(const StepPlan& plan, absl::Span<const SampleRow> rows) override;
  absl::Status Collect(absl::Span<SampleResult> results, StepDeviceTiming* timing) override;
  int max_in_flight() const override { return limits_.max_in_flight; }
  bool chains_steps() const override { return limits_.chains_steps; }
  bool recovers() const override { return true; }
  bool available() const override { return available_.load(std::memory_order_acquire); }
  absl::Status health() const override;

  const GroupLimits& limits() const { return limits_; }

 private:
  std::shared_ptr<TcpChannel> Current() const;
  // The group behind `channel` failed: stop using it and have the supervisor replace it (once per
  // group). Every launched step is dropped (the engine recomputes them). Returns the Unavailable
  // status the step fails with.
  absl::Status Lose(const std::shared_ptr<TcpChannel>& channel, const absl::Status& why);
  void Attach(std::unique_ptr<TcpChannel> channel);
  void Detach(const absl::Status& why);

  const GroupLimits limits_;
  const absl::Duration step_timeout_;
  std::unique_ptr<WorkerGroupSupervisor> supervisor_;
  mutable std::mutex mu_;
  std::shared_ptr<TcpChannel> channel_;  // null while no group serves
  absl::Status gone_;                    // the supervisor gave up
  std::atomic<bool> available_{false};
  // Engine thread: the group each launched, uncollected step went to. A step launched on a group
  // that was since replaced is lost with it, even when a new group serves by its collect.
  std::deque<std::shared_ptr<TcpChannel>> launched_;
  std::string message_;  // reused: the encoded step
  std::string results_;  // reused: the collected step's frame
};

}  // namespace llm
