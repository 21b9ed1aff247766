// Runs StepPlans over a tensor x pipeline parallel group. The control plane is MPI: the scheduling
// rank (world rank 0) broadcasts each step's StepMessage to every rank. The data plane is the
// communicator each ModelRunner was built with: TP all-reduces inside the decoder, hidden states
// stage to stage over the PP group, sampled tokens from the last stage back to rank 0.
//
// Step on one rank: [receive hidden from the previous stage] -> Forward(this stage's layers) ->
// [send hidden to the next stage | sample (last stage)] -> agree on success with every rank.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "engine/distributed/step_message.h"
#include "engine/engine.h"
#include "engine/runtime/model_runner.h"
#include "parallel/communicator.h"
#include "parallel/mpi_communicator.h"
#include "parallel/topology.h"

namespace llm {

struct PipelineGroup {
  Topology topology;
  MpiCommunicator* world = nullptr;  // control plane
  Communicator* pp = nullptr;        // hidden states between stages (group rank = stage)
};

// The part every rank runs for one step.
class PipelineStage {
 public:
  PipelineStage(ModelRunner& runner, const PipelineGroup& group) : runner_(runner), group_(group) {}
  // `results` is filled on the last stage's ranks (and, from there, on world rank 0).
  absl::Status Run(const StepPlan& plan, absl::Span<const SampleRow> rows, absl::Span<SampleResult> results);

 private:
  absl::Status RunLocal(const StepPlan& plan, absl::Span<const SampleRow> rows, absl::Span<SampleResult> results);
  ModelRunner& runner_;
  PipelineGroup group_;
};

// World rank 0: the engine's executor.
class PipelineStepExecutor final : public StepExecutor {
 public:
  PipelineStepExecutor(std::unique_ptr<ModelRunner> runner, const PipelineGroup& group)
      : runner_(std::move(runner)), group_(group), stage_(*runner_, group_) {}
  ~PipelineStepExecutor() override;  // tells the workers to stop
  absl::Status Execute(const StepPlan& plan, absl::Span<const SampleRow> rows,
                       absl::Span<SampleResult> results) override;
  ModelRunner& runner() { return *runner_; }

 private:
  std::unique_ptr<ModelRunner> runner_;
  PipelineGroup group_;
  PipelineStage stage_;
  std::string message_;
};

// Every other rank: runs broadcast steps until the stop message.
class PipelineWorker {
 public:
  PipelineWorker(std::unique_ptr<ModelRunner> runner, const PipelineGroup& group)
      : runner_(std::move(runner)), group_(group), stage_(*runner_, group_) {}
  absl::Status Run();

 private:
  std::unique_ptr<ModelRunner> runner_;
  PipelineGroup group_;
  PipelineStage stage_;
};

}  // namespace llm
