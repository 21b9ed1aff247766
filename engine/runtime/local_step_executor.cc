#include "engine/runtime/local_step_executor.h"

namespace llm {

absl::Status LocalStepExecutor::Launch(const StepPlan& plan, absl::Span<const SampleRow> rows) {
  ASSIGN_OR_RETURN(Tensor logits, runner_->Forward(plan));
  if (rows.size() != plan.logit_rows.size()) return absl::InvalidArgumentError("one sample row per logit row");
  return runner_->EnqueueSample(logits, rows, /*collect=*/true);
}

absl::Status LocalStepExecutor::Collect(absl::Span<SampleResult> results, StepDeviceTiming* timing) {
  ModelRunner::StepTiming t;
  RETURN_IF_ERROR(runner_->CollectSamples(results, timing ? &t : nullptr));
  if (timing) *timing = StepDeviceTiming{t.device_ms, t.idle_ms, true};
  return absl::OkStatus();
}

}  // namespace llm
