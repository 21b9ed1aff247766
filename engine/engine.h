// Engine: the narrow façade the server and the CLI see. Four verbs: Submit a request (an id, or a
// status saying why not), Cancel it, receive its outputs through the callback given at
// submission, and Shutdown. An engine thread runs the step loop (schedule -> launch -> collect);
// output threads turn what it decides into each request's outputs (engine/README.md). Callers
// never block either.
#pragma once

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/core/histogram.h"
#include "engine/model/config.h"
#include "engine/request.h"
#include "engine/scheduler/scheduler_config.h"

namespace llm {

class StepExecutor;
class Tokenizer;

struct EngineOptions {
  int32_t max_queue = 1024;      // waiting requests before Submit answers RESOURCE_EXHAUSTED
  SchedulerOptions scheduler;    // block size/count and table width come from the runner
  int64_t max_context = 0;       // prompt + max_tokens limit
  int32_t output_threads = 1;    // threads that detokenize and deliver outputs
  // Overlapped steps: launch step N+1 before collecting step N where the executor can chain
  // steps (StepExecutor::chains_steps). false: every step is collected before the next is planned.
  bool overlap_steps = true;
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
  // Device time of the collected steps and the device's idle gaps between them, in seconds (where
  // the executor times its steps): idle / (busy + idle) is the fraction of time the device waited
  // for the host.
  double device_busy_seconds = 0;
  double device_idle_seconds = 0;
  // Replicas (worker groups) and how many can run steps now; losses of a replica's workers that
  // its requests survived (recomputed on new workers).
  int32_t replicas = 1;
  int32_t replicas_serving = 1;
  uint64_t recoveries = 0;
};

// Per-step distributions, observed lock-free as steps run (Prometheus histograms).
struct EngineStepMetrics {
  // Engine thread: planning a step (scheduler + sampling rows), launching it (executor), waiting
  // for its results, and handing them to the output threads (stop checks, events).
  Histogram schedule_seconds{Histogram::StepPhaseBounds()};
  Histogram launch_seconds{Histogram::StepPhaseBounds()};
  Histogram wait_seconds{Histogram::StepPhaseBounds()};
  Histogram collect_seconds{Histogram::StepPhaseBounds()};
  // Device time of a step (where the executor times it), and an output thread's time per step.
  Histogram device_seconds{Histogram::StepPhaseBounds()};
  Histogram output_seconds{Histogram::StepPhaseBounds()};
  Histogram sequences{Histogram::PowersOfTwoBounds()};
  Histogram tokens{Histogram::PowersOfTwoBounds()};
  // From the loss of a replica's workers to its first token on new ones (detection, restart,
  // model load and the recomputation of what its requests had).
  Histogram recovery_seconds{Histogram::RequestLatencyBounds()};
};

class Engine {
 public:
  // `executor` runs the steps; `tokenizer` may be null (then requests must not ask for text).
  static absl::StatusOr<std::unique_ptr<Engine>> Create(const EngineInfo& info, const EngineOptions& options,
                                                        std::unique_ptr<StepExecutor> executor,
                                                        std::shared_ptr<const Tokenizer> tokenizer);
  // Data-parallel replicas of one model, one executor each (each its own worker group, with
  // `info`'s limits): every request goes to the least-loaded replica that serves, and a replica
  // whose workers are being replaced takes none until they are back.
  static absl::StatusOr<std::unique_ptr<Engine>> Create(const EngineInfo& info, const EngineOptions& options,
                                                        std::vector<std::unique_ptr<StepExecutor>> replicas,
                                                        std::shared_ptr<const Tokenizer> tokenizer);
  ~Engine();  // Shutdown(false)

  // Validates and queues the request. InvalidArgument for bad input, ResourceExhausted when the
  // queue is full, Unavailable while shutting down or once no replica will ever serve again. A
  // request queued while every replica's workers are being replaced waits for them (bounded by
  // its deadline).
  absl::StatusOr<RequestId> Submit(GenerateRequest request, OutputCallback callback);
  // The request finishes with FinishReason::kCancelled within one step; unknown ids are ignored.
  void Cancel(RequestId id);
  // Stops accepting requests. With drain, running and queued requests finish normally; without,
  // they are cancelled. Returns when every request's last output has been delivered.
  void Shutdown(bool drain);

  // OK while some replica runs steps; Unavailable saying why otherwise: every replica's workers
  // are being replaced (requests wait), or none will ever serve again (requests fail).
  absl::Status Health() const;
  // Whether no replica will ever serve again (Health's second case): a server should end.
  bool failed() const;

  const EngineInfo& info() const;
  EngineStats stats() const;
  const EngineStepMetrics& step_metrics() const;
  const Tokenizer* tokenizer() const;
  // Validation alone (used by Submit; exposed so front-ends can reject early).
  absl::Status Validate(const GenerateRequest& request) const;

  class Impl;

 private:
  explicit Engine(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace llm
