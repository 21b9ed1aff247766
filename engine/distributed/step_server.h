// StepServer: world rank 0 of a worker group serving a front end's engine
// (engine/distributed/worker_protocol.h). It runs each step the front end launches on the group's
// executor (a PipelineStepExecutor over every rank, or the process's own runner for a group of
// one) and answers each collect with the sampled tokens. It holds no request state: the front end
// has all of it, so losing this process loses nothing a new group cannot recompute.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "engine/distributed/worker_protocol.h"
#include "engine/runtime/step_executor.h"
#include "parallel/tcp_channel.h"

namespace llm {

class StepServer {
 public:
  // Connects to the front end at `address` (retrying until `timeout`: it listens before it
  // launches, but a slow network may lag), says `hello` and waits for the answer. The front end's
  // refusal is FailedPrecondition with its reason.
  static absl::StatusOr<std::unique_ptr<StepServer>> Connect(const std::string& address, const WorkerHello& hello,
                                                             absl::Duration timeout);

  // Serves steps on `executor` until the front end says stop (OK), goes away (Unavailable), or a
  // step fails (its error, after it was reported to the front end: the group is over).
  absl::Status Serve(StepExecutor& executor);

 private:
  explicit StepServer(std::unique_ptr<TcpChannel> channel) : channel_(std::move(channel)) {}
  std::unique_ptr<TcpChannel> channel_;
};

}  // namespace llm
