#include "engine/distributed/remote_step_executor.h"

#include "absl/strings/str_cat.h"
#include "engine/distributed/step_message.h"

namespace llm {

RemoteStepExecutor::RemoteStepExecutor(std::unique_ptr<WorkerGroupSupervisor> supervisor)
    : limits_(supervisor->first_hello().limits),
      step_timeout_(supervisor->options().step_timeout),
      supervisor_(std::move(supervisor)) {
  Attach(supervisor_->TakeFirstChannel());
  WorkerGroupEvents events;
  events.attach = [this](std::unique_ptr<TcpChannel> channel) { Attach(std::move(channel)); };
  events.detach = [this](const absl::Status& why) { Detach(why); };
  events.gone = [this](const absl::Status& why) {
    std::lock_guard<std::mutex> lock(mu_);
    gone_ = why;
  };
  supervisor_->Watch(std::move(events));
}

RemoteStepExecutor::~RemoteStepExecutor() {
  supervisor_->Stop([this] {
    if (std::shared_ptr<TcpChannel> channel = Current())
      (void)channel->Send(static_cast<uint32_t>(WorkerFrame::kStop), "", absl::Seconds(1));
  });
  std::lock_guard<std::mutex> lock(mu_);
  if (channel_) channel_->Shutdown();
}

absl::Status RemoteStepExecutor::health() const {
  std::lock_guard<std::mutex> lock(mu_);
  return gone_;
}

std::shared_ptr<TcpChannel> RemoteStepExecutor::Current() const {
  std::lock_guard<std::mutex> lock(mu_);
  return channel_;
}

void RemoteStepExecutor::Attach(std::unique_ptr<TcpChannel> channel) {
  std::lock_guard<std::mutex> lock(mu_);
  channel_ = std::move(channel);
  available_.store(channel_ != nullptr, std::memory_order_release);
}

void RemoteStepExecutor::Detach(const absl::Status& why) {
  std::lock_guard<std::mutex> lock(mu_);
  // Wakes a Collect waiting on it; the engine thread then sees the loss as a failed step.
  if (channel_) channel_->Shutdown();
  channel_.reset();
  available_.store(false, std::memory_order_release);
}

absl::Status RemoteStepExecutor::Lose(const std::shared_ptr<TcpChannel>& channel, const absl::Status& why) {
  bool current = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    current = channel_ == channel && channel != nullptr;
    if (current) {
      channel_.reset();
      available_.store(false, std::memory_order_release);
    }
  }
  if (channel) channel->Shutdown();
  if (current) supervisor_->ReportLoss(why);
  launched_.clear();
  return absl::UnavailableError(absl::StrCat("the worker group was lost: ", why.message()));
}

absl::Status RemoteStepExecutor::Launch(const StepPlan& plan, absl::Span<const SampleRow> rows) {
  std::shared_ptr<TcpChannel> channel = Current();
  if (!channel) {
    launched_.clear();  // the engine drops every launched step with this failure
    return absl::UnavailableError("no worker group serves");
  }
  EncodeStepMessage(plan, rows, message_);
  absl::Status sent = channel->Send(static_cast<uint32_t>(WorkerFrame::kLaunch), message_, step_timeout_);
  if (!sent.ok()) return Lose(channel, sent);
  launched_.push_back(std::move(channel));
  return absl::OkStatus();
}

absl::Status RemoteStepExecutor::Collect(absl::Span<SampleResult> results, StepDeviceTiming* timing) {
  if (launched_.empty()) return absl::FailedPreconditionError("no launched step to collect");
  std::shared_ptr<TcpChannel> channel = std::move(launched_.front());
  launched_.pop_front();
  if (channel != Current()) {
    // Its group was replaced since (the loss was seen elsewhere first): the step is gone with it.
    launched_.clear();
    return absl::UnavailableError("the worker group that ran this step was lost");
  }
  absl::Status status = channel->Send(static_cast<uint32_t>(WorkerFrame::kCollect), "", step_timeout_);
  uint32_t kind = 0;
  if (status.ok()) {
    // The watchdog: a group that cannot finish a step within the deadline is hung (a stopped or
    // stuck rank, a collective that never completes) and is replaced.
    status = channel->Receive(&kind, &results_, step_timeout_);
    if (absl::IsDeadlineExceeded(status))
      status = absl::DeadlineExceededError(absl::StrCat("the worker group returned no step within ",
                                                        absl::FormatDuration(step_timeout_), " (the watchdog)"));
  }
  if (status.ok() && kind != static_cast<uint32_t>(WorkerFrame::kResults))
    status = absl::DataLossError(absl::StrCat("unexpected frame ", kind, " from the worker group"));
  if (status.ok()) status = DecodeStepResults(results_, results, timing);
  if (!status.ok()) return Lose(channel, status);
  return absl::OkStatus();
}

}  // namespace llm
