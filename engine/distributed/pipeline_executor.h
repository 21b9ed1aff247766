// Runs StepPlans over a tensor x pipeline parallel group, keeping up to PP micro-batches in
// flight so that every stage works at once.
//
// Control plane (MPI, host): world rank 0 (stage 0, TP rank 0) sends each step's StepMessage to
// the other ranks of stage 0; every stage forwards it, with its hidden state, to the same TP rank
// of the next stage; the last stage's TP rank 0 sends the sampled tokens back to rank 0, where a
// receiver thread queues them. Nothing is collective across stages, so stage s works on
// micro-batch i while stage s+1 works on micro-batch i-1; each stage handles micro-batches in
// launch order, which also keeps KV blocks safe to reuse as soon as the scheduler frees them.
// Data plane: TP all-reduces inside the decoder (the runner's communicator), hidden states over
// the PP group.
#pragma once

#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/time.h"
#include "engine/distributed/step_message.h"
#include "engine/runtime/model_runner.h"
#include "engine/runtime/step_executor.h"
#include "parallel/communicator.h"
#include "parallel/mpi_communicator.h"
#include "parallel/topology.h"

namespace llm {

// When a stage ran one micro-batch (for timelines).
struct StageSpan {
  absl::Time begin, end;
  int32_t tokens = 0;
};

struct PipelineGroup {
  Topology topology;
  MpiCommunicator* steps = nullptr;    // control: step messages (waits without deadline)
  MpiCommunicator* results = nullptr;  // control: sampled tokens back to rank 0
  Communicator* pp = nullptr;          // data: hidden states between stages (group rank = stage)
};

// One step through this rank's stage outside the engine (tools, tests), every rank of the group
// calling it with the same plan: receives the hidden state from the previous stage, runs this
// stage's layers, sends the result to the next stage. Returns the logits on the last stage
// (every TP rank holds all of them), an empty tensor on the others.
absl::StatusOr<Tensor> ForwardThroughStage(ModelRunner& runner, Communicator& pp, const Topology& topology,
                                           const StepPlan& plan);

// One micro-batch on one rank: receive the hidden state, run this stage's layers, then forward
// the message and hidden state, or sample (last stage). Nothing waits for the device except the
// last stage's reporting rank of a pipeline, which sends the samples to rank 0: with one stage,
// every rank only enqueues, so the next step's launch overlaps this one's device time.
class PipelineStage {
 public:
  PipelineStage(ModelRunner& runner, const PipelineGroup& group) : runner_(runner), group_(group) {}
  // `message` is the encoded StepMessage; `ok` false marks a step that failed upstream (forwarded
  // without compute, so that every rank stays in step). World rank 0 with one stage collects the
  // samples later (ModelRunner::CollectSamples); the others never need them.
  // A step that fails on this rank (upstream_ok, then an error here) abandons the group's work
  // (MpiCommunicator::RaiseGroupAbort): no peer is left waiting for this rank, and the group ends.
  absl::Status Run(const std::string& message, const StepPlan& plan, absl::Span<const SampleRow> rows,
                   bool upstream_ok);
  // Raises the abort notice for `status` (a failure of this rank) and returns it.
  absl::Status Abandon(const absl::Status& status);
  const std::vector<StageSpan>& timeline() const { return timeline_; }

 private:
  ModelRunner& runner_;
  PipelineGroup group_;
  std::vector<StageSpan> timeline_;
};

// World rank 0: the engine's executor.
class PipelineStepExecutor final : public StepExecutor {
 public:
  PipelineStepExecutor(std::unique_ptr<ModelRunner> runner, const PipelineGroup& group);
  ~PipelineStepExecutor() override;  // stops the workers
  absl::Status Launch(const StepPlan& plan, absl::Span<const SampleRow> rows) override;
  absl::Status Collect(absl::Span<SampleResult> results, StepDeviceTiming* timing) override;
  // One stage (TP alone): overlapped steps chained on every rank's device, as on one GPU (each
  // TP rank samples the same tokens from the same all-gathered logits). A pipeline: one
  // micro-batch per stage in flight, its tokens sampled on the last stage.
  int max_in_flight() const override { return group_.topology.pp_size() == 1 ? 2 : group_.topology.pp_size(); }
  bool chains_steps() const override { return group_.topology.pp_size() == 1; }
  // FailedPrecondition once any rank abandoned a step: the group's communicators take no more.
  absl::Status health() const override;
  const std::vector<StageSpan>& timeline() const { return stage_.timeline(); }

 private:
  void ReceiveResults();

  std::unique_ptr<ModelRunner> runner_;
  PipelineGroup group_;
  PipelineStage stage_;
  std::string message_;

  // Results from the last stage (PP > 1), filled by the receiver thread.
  std::mutex mu_;
  std::condition_variable cv_;
  int64_t expected_ = 0;  // launched steps whose results are still to be received
  bool stop_ = false;
  std::deque<absl::StatusOr<std::string>> received_;
  std::thread receiver_;
};

// Every other rank: runs forwarded steps until the stop message, or until a step fails on any
// rank (an error then: the group is over).
class PipelineWorker {
 public:
  PipelineWorker(std::unique_ptr<ModelRunner> runner, const PipelineGroup& group)
      : runner_(std::move(runner)), group_(group), stage_(*runner_, group_) {}
  absl::Status Run();
  const std::vector<StageSpan>& timeline() const { return stage_.timeline(); }

 private:
  std::unique_ptr<ModelRunner> runner_;
  PipelineGroup group_;
  PipelineStage stage_;
};

}  // namespace llm
