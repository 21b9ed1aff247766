// LocalStepExecutor: runs steps on this process's ModelRunner, overlapped: each Launch enqueues
// the step (upload, forward, sampling) and returns, so that the engine plans the next step while
// the device runs this one; the next step takes this one's samples on the device.
#pragma once

#include <memory>

#include "engine/runtime/model_runner.h"
#include "engine/runtime/step_executor.h"

namespace llm {

class LocalStepExecutor final : public StepExecutor {
 public:
  explicit LocalStepExecutor(std::unique_ptr<ModelRunner> runner) : runner_(std::move(runner)) {}
  absl::Status Launch(const StepPlan& plan, absl::Span<const SampleRow> rows) override;
  absl::Status Collect(absl::Span<SampleResult> results, StepDeviceTiming* timing) override;
  int max_in_flight() const override { return 2; }
  bool chains_steps() const override { return true; }
  ModelRunner& runner() { return *runner_; }

 private:
  std::unique_ptr<ModelRunner> runner_;
};

}  // namespace llm
