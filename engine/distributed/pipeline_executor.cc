#include "engine/distributed/pipeline_executor.h"

#include <cstring>

#include "absl/strings/str_cat.h"

namespace llm {
namespace {

// Every message starts with one byte: 1 when the step is healthy so far, 0 when a stage failed
// (later stages then skip it, and rank 0 reports the failure).
std::string WithFlag(bool ok, const std::string& body) { return std::string(1, ok ? 1 : 0) + body; }

// A later stage receives a step's hidden state into a buffer sized for its own step budget: a
// plan over it is rejected before anything is received (ModelRunner::Forward would reject it too,
// but only after the receive had written past the buffer).
absl::Status CheckHiddenInput(const ModelRunner& runner, int32_t num_tokens) {
  if (num_tokens <= runner.limits().max_tokens) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("step plan of ", num_tokens, " tokens is outside the limits (",
                                                 runner.limits().max_tokens, " tokens a step)"));
}

}  // namespace

absl::StatusOr<Tensor> ForwardThroughStage(ModelRunner& runner, Communicator& pp, const Topology& t,
                                           const StepPlan& plan) {
  if (!t.is_first_stage()) {
    RETURN_IF_ERROR(CheckHiddenInput(runner, plan.num_tokens()));
    Tensor hidden = runner.HiddenInput(plan.num_tokens());
    RETURN_IF_ERROR(pp.Recv(hidden.data(), hidden.numel(), hidden.dtype(), t.pp_stage() - 1));
  }
  ASSIGN_OR_RETURN(Tensor out, runner.Forward(plan));
  if (t.is_last_stage()) return out;
  RETURN_IF_ERROR(pp.Send(out.data(), out.numel(), out.dtype(), t.pp_stage() + 1));
  return Tensor();
}

absl::Status PipelineStage::Abandon(const absl::Status& status) {
  // Peers of this stage may be waiting in a collective this rank will not enter, other stages for
  // messages it will not send: the notice ends every such wait at once, on every rank.
  if (group_.topology.world_size() > 1)
    group_.steps->RaiseGroupAbort(absl::StrCat("rank ", group_.topology.rank(), " failed a step: ", status.message()));
  return status;
}

absl::Status PipelineStage::Run(const std::string& message, const StepPlan& plan, absl::Span<const SampleRow> rows,
                                bool upstream_ok) {
  const Topology& t = group_.topology;
  const int32_t n = plan.num_tokens();
  absl::Status status = upstream_ok ? absl::OkStatus() : absl::AbortedError("an earlier stage failed this step");
  const absl::Time begin = absl::Now();
  Tensor hidden;
  if (status.ok() && !t.is_first_stage()) status = CheckHiddenInput(runner_, n);
  if (status.ok() && !t.is_first_stage()) {
    hidden = runner_.HiddenInput(n);
    status = group_.pp->Recv(hidden.data(), hidden.numel(), hidden.dtype(), t.pp_stage() - 1);
  }
  absl::StatusOr<Tensor> out = absl::AbortedError("not run");
  if (status.ok()) {
    out = runner_.Forward(plan);
    if (!out.ok()) status = out.status();
  }
  if (!status.ok() && upstream_ok) return Abandon(status);
  if (!t.is_last_stage()) {
    // No wait for the device here: the hidden-state Send is enqueued behind the forward on the
    // same stream, so this stage's host work for the next micro-batch (scheduling, metadata
    // upload, the next launch) overlaps this one's GPU time instead of adding a bubble per
    // micro-batch. A device error surfaces at this rank's next synchronizing call. (On a device
    // backend the span below is therefore the enqueue time; host backends run synchronously.)
    timeline_.push_back({begin, absl::Now(), n});
    // Forward the step (flagged) and, when healthy, the hidden state.
    RETURN_IF_ERROR(group_.steps->SendBytes(WithFlag(status.ok(), message), t.RankAt(t.pp_stage() + 1, t.tp_rank())));
    if (status.ok()) RETURN_IF_ERROR(group_.pp->Send(out->data(), out->numel(), out->dtype(), t.pp_stage() + 1));
    return status;
  }
  // The last stage's first TP rank reports to rank 0 (unless it is rank 0, which collects later).
  const bool reports = t.tp_rank() == 0 && t.rank() != 0;
  const bool collects = t.rank() == 0;
  if (status.ok()) status = runner_.EnqueueSample(*out, rows, reports || collects);
  std::vector<SampleResult> results;
  if (reports && status.ok()) {
    results.resize(rows.size());
    status = runner_.CollectSamples(absl::MakeSpan(results));
  }
  if (!status.ok() && upstream_ok) return Abandon(status);
  timeline_.push_back({begin, absl::Now(), n});
  if (reports) {
    std::string body;
    if (status.ok()) EncodeSampleResults(results, body);
    RETURN_IF_ERROR(group_.results->SendBytes(WithFlag(status.ok(), body), 0));
  }
  return status;
}

PipelineStepExecutor::PipelineStepExecutor(std::unique_ptr<ModelRunner> runner, const PipelineGroup& group)
    : runner_(std::move(runner)), group_(group), stage_(*runner_, group_) {
  if (group_.topology.pp_size() > 1) receiver_ = std::thread([this] { ReceiveResults(); });
}

PipelineStepExecutor::~PipelineStepExecutor() {
  // The empty message stops the workers; stage 0 peers get it from here, later stages forwarded.
  const Topology& t = group_.topology;
  for (int r = 1; r < t.tp_size(); ++r) (void)group_.steps->SendBytes(std::string(), r);
  if (t.pp_size() > 1) (void)group_.steps->SendBytes(std::string(), t.RankAt(1, 0));
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (receiver_.joinable()) receiver_.join();
}

void PipelineStepExecutor::ReceiveResults() {
  const Topology& t = group_.topology;
  const int from = t.RankAt(t.pp_size() - 1, 0);
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || expected_ > 0; });
      if (expected_ == 0) return;  // stopping with nothing outstanding
    }
    std::string bytes;
    absl::Status s = group_.results->RecvBytes(&bytes, from);
    std::lock_guard<std::mutex> lock(mu_);
    --expected_;
    if (s.ok()) received_.push_back(std::move(bytes));
    else received_.push_back(s);
    cv_.notify_all();
  }
}

absl::Status PipelineStepExecutor::Launch(const StepPlan& plan, absl::Span<const SampleRow> rows) {
  const Topology& t = group_.topology;
  EncodeStepMessage(plan, rows, message_);
  const std::string flagged = WithFlag(true, message_);
  // A step a peer does not take within the deadline (hung, stopped) leaves the group out of step:
  // abandon it on every rank, so the group's health fails instead of the next step waiting again.
  for (int r = 1; r < t.tp_size(); ++r)
    if (absl::Status s = group_.steps->SendBytes(flagged, r); !s.ok()) return stage_.Abandon(s);
  if (t.pp_size() > 1) {
    std::lock_guard<std::mutex> lock(mu_);
    ++expected_;
    cv_.notify_all();
  }
  // A failure here has abandoned the group's work on every rank (PipelineStage::Abandon).
  return stage_.Run(message_, plan, rows, true);
}

absl::Status PipelineStepExecutor::health() const {
  if (!group_.steps->aborted()) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat("the group's communicators are broken: ", group_.steps->GroupAborted().value_or("")));
}

absl::Status PipelineStepExecutor::Collect(absl::Span<SampleResult> results, StepDeviceTiming* timing) {
  if (group_.topology.pp_size() == 1) {
    ModelRunner::StepTiming t;
    RETURN_IF_ERROR(runner_->CollectSamples(results, timing ? &t : nullptr));
    if (timing) *timing = StepDeviceTiming{t.device_ms, t.idle_ms, true};
    return absl::OkStatus();
  }
  absl::StatusOr<std::string> bytes;
  {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return !received_.empty(); });
    bytes = std::move(received_.front());
    received_.pop_front();
  }
  if (!bytes.ok()) return bytes.status();
  if (bytes->empty() || (*bytes)[0] == 0) return absl::InternalError("a pipeline stage failed this step (see its log)");
  if (absl::Status s = DecodeSampleResults(std::string_view(*bytes).substr(1), results); !s.ok())
    return absl::InternalError(absl::StrCat("sampled tokens do not match the launched step: ", s.message()));
  return absl::OkStatus();
}

absl::Status PipelineWorker::Run() {
  const Topology& t = group_.topology;
  const int from = t.is_first_stage() ? 0 : t.RankAt(t.pp_stage() - 1, t.tp_rank());
  std::string bytes;
  StepMessage message;
  for (;;) {
    RETURN_IF_ERROR(group_.steps->RecvBytes(&bytes, from));
    if (bytes.empty()) {  // stop: pass it on down the pipeline
      if (!t.is_last_stage())
        RETURN_IF_ERROR(group_.steps->SendBytes(std::string(), t.RankAt(t.pp_stage() + 1, t.tp_rank())));
      return absl::OkStatus();
    }
    const bool upstream_ok = bytes[0] != 0;
    const std::string body = bytes.substr(1);
    if (absl::Status s = DecodeStepMessage(body, message); !s.ok()) return stage_.Abandon(s);
    // A step this rank failed (or that another rank abandoned) ends the group: every rank's
    // waits have given up, and the communicators take no more steps.
    RETURN_IF_ERROR(stage_.Run(body, message.plan, message.rows, upstream_ok));
  }
}

}  // namespace llm
