// Engine: the narrow façade the server and the CLI see. Four verbs: Submit a request (an id, or a
// status saying why not), Cancel it, receive its outputs through the callback given at
// submission, and Shutdown. A single engine thread runs the step loop
// (schedule -> execute -> sample -> stream outputs); callers never block it.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <filesystem>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/model/config.h"
#include "engine/request.h"
#include "engine/runtime/model_runner.h"
#include "engine/scheduler/scheduler.h"
#include "engine/tokenizer/tokenizer.h"

namespace llm {

// Executes StepPlans somewhere: on this process's ModelRunner, or spread over the ranks of a
// tensor/pipeline-parallel group. The engine does not know which. Steps are launched and their
// sampled tokens collected in launch order; up to max_in_flight() steps may be outstanding (a
// pipeline of P stages keeps P micro-batches in flight so that every stage works).
class StepExecutor {
 public:
  virtual ~StepExecutor() = default;
  // `rows` need only stay valid during the call.
  virtual absl::Status Launch(const StepPlan& plan, absl::Span<const SampleRow> rows) = 0;
  // Results of the oldest launched step, one per row it was launched with.
  virtual absl::Status Collect(absl::Span<SampleResult> results) = 0;
  virtual int max_in_flight() const { return 1; }

  absl::Status Execute(const StepPlan& plan, absl::Span<const SampleRow> rows, absl::Span<SampleResult> results) {
    RETURN_IF_ERROR(Launch(plan, rows));
    return Collect(results);
  }
};

struct EngineOptions {
  int32_t max_queue = 1024;      // waiting requests before Submit answers RESOURCE_EXHAUSTED
  SchedulerOptions scheduler;    // block size/count and table width come from the runner
  int64_t max_context = 0;       // prompt + max_tokens limit
};

// What a deployment reports about itself (ModelInfo, metrics).
struct EngineInfo {
  ModelConfig config;
  int64_t max_context = 0;
  int32_t max_tokens_per_step = 0;
  int32_t max_seqs = 0;
  int32_t kv_blocks = 0;
  int32_t kv_block_size = 0;
};

struct EngineStats {
  SchedulerStats scheduler;
  uint64_t steps = 0;
  uint64_t generated_tokens = 0;
  uint64_t prompt_tokens = 0;
};

class Engine {
 public:
  // `executor` runs the steps; `tokenizer` may be null (then requests must not ask for text).
  static absl::StatusOr<std::unique_ptr<Engine>> Create(const EngineInfo& info, const EngineOptions& options,
                                                        std::unique_ptr<StepExecutor> executor,
                                                        std::shared_ptr<const Tokenizer> tokenizer);
  ~Engine();  // Shutdown(false)

  // Validates and queues the request. InvalidArgument for bad input, ResourceExhausted when the
  // queue is full, Unavailable while shutting down.
  absl::StatusOr<RequestId> Submit(GenerateRequest request, OutputCallback callback);
  // The request finishes with FinishReason::kCancelled within one step; unknown ids are ignored.
  void Cancel(RequestId id);
  // Stops accepting requests. With drain, running and queued requests finish normally; without,
  // they are cancelled. Returns when the engine thread has stopped.
  void Shutdown(bool drain);

  const EngineInfo& info() const { return info_; }
  EngineStats stats() const;
  const Tokenizer* tokenizer() const { return tokenizer_.get(); }
  // Validation alone (used by Submit; exposed so front-ends can reject early).
  absl::Status Validate(const GenerateRequest& request) const;

 private:
  Engine(const EngineInfo& info, const EngineOptions& options, std::unique_ptr<StepExecutor> executor,
         std::shared_ptr<const Tokenizer> tokenizer);
  void Loop();
  void TakeInbox();
  void Step();
  void LaunchSteps();
  void CollectStep();
  void Finish(Sequence* seq, FinishReason reason, absl::Status status = absl::OkStatus());
  void Emit(Sequence* seq, bool finished, FinishReason reason, const absl::Status& status);
  void AbortAll(const absl::Status& status);

  const EngineInfo info_;
  const EngineOptions options_;
  std::unique_ptr<StepExecutor> executor_;
  std::shared_ptr<const Tokenizer> tokenizer_;
  std::vector<int32_t> eos_ids_;

  // Shared with callers, under mu_.
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::unique_ptr<Sequence>> inbox_;
  std::vector<RequestId> cancels_;
  int32_t queued_ = 0;  // inbox + waiting, for the queue limit
  bool accepting_ = true;
  bool stop_ = false;
  bool drain_ = false;
  RequestId next_id_ = 1;
  EngineStats stats_;

  // Engine thread only.
  Scheduler scheduler_;
  std::unordered_map<RequestId, std::unique_ptr<Sequence>> sequences_;
  uint64_t arrival_counter_ = 0;
  StepPlan plan_;
  std::vector<ScheduledSequence> scheduled_;
  std::vector<SampleRow> rows_;
  std::vector<SampleResult> results_;
  // Launched steps whose tokens have not come back, oldest first. Sequences are named by id: one
  // may finish (cancel, deadline) while its step is in flight, and its result is then dropped.
  struct InFlightStep {
    std::vector<std::pair<RequestId, int32_t>> advanced;  // (sequence, tokens fed)
    std::vector<RequestId> sampled;                       // one per result row
    uint64_t prompt_tokens = 0;
  };
  std::deque<InFlightStep> in_flight_;
  std::thread thread_;
};

// Adapts a single-process ModelRunner to StepExecutor.
class LocalStepExecutor final : public StepExecutor {
 public:
  explicit LocalStepExecutor(std::unique_ptr<ModelRunner> runner) : runner_(std::move(runner)) {}
  absl::Status Launch(const StepPlan& plan, absl::Span<const SampleRow> rows) override {
    results_.resize(rows.size());
    return runner_->Execute(plan, rows, absl::MakeSpan(results_));
  }
  absl::Status Collect(absl::Span<SampleResult> results) override {
    if (results.size() != results_.size()) return absl::InternalError("collect does not match the launched step");
    std::copy(results_.begin(), results_.end(), results.begin());
    return absl::OkStatus();
  }
  ModelRunner& runner() { return *runner_; }

 private:
  std::unique_ptr<ModelRunner> runner_;
  std::vector<SampleResult> results_;
};

}  // namespace llm
