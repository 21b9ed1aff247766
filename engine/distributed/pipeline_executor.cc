#include "engine/distributed/pipeline_executor.h"

#include "absl/strings/str_cat.h"

namespace llm {

absl::Status PipelineStage::RunLocal(const StepPlan& plan, absl::Span<const SampleRow> rows,
                                     absl::Span<SampleResult> results) {
  const Topology& t = group_.topology;
  const int32_t n = plan.num_tokens();
  if (!t.is_first_stage()) {
    Tensor in = runner_.HiddenInput(n);
    RETURN_IF_ERROR(group_.pp->Recv(in.data(), in.numel(), in.dtype(), t.pp_stage() - 1));
  }
  ASSIGN_OR_RETURN(Tensor out, runner_.Forward(plan));
  if (!t.is_last_stage()) {
    RETURN_IF_ERROR(runner_.backend().Synchronize());
    return group_.pp->Send(out.data(), out.numel(), out.dtype(), t.pp_stage() + 1);
  }
  return runner_.Sample(out, rows, results);
}

absl::Status PipelineStage::Run(const StepPlan& plan, absl::Span<const SampleRow> rows,
                                absl::Span<SampleResult> results) {
  const Topology& t = group_.topology;
  absl::Status local = RunLocal(plan, rows, results);
  // Every rank learns whether any rank failed, so no rank waits for a step that will not come.
  int32_t failed = local.ok() ? 0 : 1;
  RETURN_IF_ERROR(group_.world->AllReduceSum(&failed, 1, DType::kI32));
  if (!local.ok()) return local;
  if (failed) return absl::InternalError("a step failed on another rank (see that rank's log)");
  // Sampled tokens travel from the last stage's first TP rank to world rank 0.
  const int last_stage_root = t.RankAt(t.pp_size() - 1, 0);
  if (last_stage_root != 0 && !rows.empty()) {
    const size_t bytes = rows.size() * sizeof(SampleResult);
    if (t.rank() == last_stage_root) return group_.world->Send(results.data(), bytes, DType::kU8, 0);
    if (t.rank() == 0) return group_.world->Recv(results.data(), bytes, DType::kU8, last_stage_root);
  }
  return absl::OkStatus();
}

PipelineStepExecutor::~PipelineStepExecutor() {
  std::string stop;  // empty: the workers' stop message
  (void)group_.world->BroadcastBytes(&stop, 0);
}

absl::Status PipelineStepExecutor::Execute(const StepPlan& plan, absl::Span<const SampleRow> rows,
                                           absl::Span<SampleResult> results) {
  EncodeStepMessage(plan, rows, message_);
  RETURN_IF_ERROR(group_.world->BroadcastBytes(&message_, 0));
  return stage_.Run(plan, rows, results);
}

absl::Status PipelineWorker::Run() {
  std::string bytes;
  StepMessage message;
  std::vector<SampleResult> results;
  for (;;) {
    RETURN_IF_ERROR(group_.world->BroadcastBytes(&bytes, 0));
    if (bytes.empty()) return absl::OkStatus();
    RETURN_IF_ERROR(DecodeStepMessage(bytes, message));
    results.resize(message.rows.size());
    absl::Status s = stage_.Run(message.plan, message.rows, absl::MakeSpan(results));
    // A failed step is reported by rank 0 to its requests; the worker keeps serving.
    if (!s.ok()) std::fprintf(stderr, "rank %d: step failed: %s\n", group_.topology.rank(), std::string(s.message()).c_str());
  }
}

}  // namespace llm
