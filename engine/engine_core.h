// EngineCore: one replica of the engine: its scheduler, its step loop on an engine thread, its
// executor and its output threads (engine/README.md). The Engine façade (engine/engine.h)
// validates requests, gives them ids and routes each to one core; with data-parallel replicas
// (several worker groups of one model) it holds one core per group.
//
// A core whose executor loses its workers (StepExecutor::available() turns false) keeps its
// requests: everything launched is dropped, every sequence waits with nothing computed
// (Scheduler::ResetDeviceState), and once new workers serve each recomputes prompt + the tokens
// it already has and goes on with exactly the tokens an undisturbed run gives. Cancels and
// deadlines are honoured meanwhile. Once the executor's health() says it never will serve again,
// the requests fail with that reason.
#pragma once

#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "engine/engine.h"
#include "engine/output/request_streamer.h"
#include "engine/runtime/step_executor.h"
#include "engine/scheduler/scheduler.h"

namespace llm {

class EngineCore {
 public:
  // `index` names the replica in logs; `metrics` (shared by every core) outlives the core.
  EngineCore(int index, const EngineInfo& info, const EngineOptions& options, std::unique_ptr<StepExecutor> executor,
             std::shared_ptr<const Tokenizer> tokenizer, EngineStepMetrics* metrics);
  ~EngineCore() { Shutdown(false); }

  // Queues a validated request (id and seed already given). ResourceExhausted when the queue is
  // full, Unavailable while shutting down or once the executor is gone for good.
  absl::Status Enqueue(std::unique_ptr<Sequence> seq, StreamedRequest streamed);
  // Finishes the request at the next loop iteration; unknown ids are ignored.
  void Stop(RequestId id, FinishReason reason, absl::Status status);
  void Shutdown(bool drain);

  EngineStats stats() const;
  // Requests queued or running: what routing balances.
  int64_t load() const;
  bool available() const { return executor_->available(); }
  absl::Status health() const { return executor_->health(); }

 private:
  // A request the engine thread must finish at its next iteration.
  struct StopOrder {
    RequestId id;
    FinishReason reason;
    absl::Status status;
  };
  // A launched step whose tokens have not come back. Sequences are named by id: one may finish
  // (EOS in the step before, cancel, deadline, stop string) while its step is in flight, and its
  // result is then dropped.
  struct InFlightStep {
    std::vector<RequestId> launched;  // every sequence of the step
    std::vector<RequestId> sampled;   // one per result row
    uint64_t prompt_tokens = 0;
  };

  void Loop();
  void TakeInbox();
  void LaunchSteps();
  void CollectStep();
  void Finish(Sequence* seq, FinishReason reason, absl::Status status = absl::OkStatus());
  // A failed Launch or Collect: a loss of the workers (StepExecutor::recovers) suspends, anything
  // else fails every request.
  void OnStepFailure(const absl::Status& status);
  void AbortAll(const absl::Status& status);
  // The executor will never serve again (its health() failed): every request fails with
  // Unavailable and the reason, and new ones are refused.
  void FailForGood(const absl::Status& health);
  // The executor lost its workers: keep every request, recompute later.
  void Suspend(const absl::Status& why);
  void PublishStats();

  const int index_;
  const EngineInfo info_;
  const EngineOptions options_;
  EngineStepMetrics* const metrics_;
  std::unique_ptr<StepExecutor> executor_;
  std::vector<int32_t> eos_ids_;
  int max_in_flight_ = 1;
  std::unique_ptr<RequestStreamer> streamer_;

  // Shared with callers, under mu_.
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::unique_ptr<Sequence>> inbox_;
  std::vector<StopOrder> stops_;
  int32_t queued_ = 0;  // inbox + waiting, for the queue limit
  bool accepting_ = true;
  bool stop_ = false;
  bool drain_ = false;
  bool joined_ = false;
  absl::Status gone_;  // set once the executor will never serve again: new requests are refused
  EngineStats stats_;

  // Engine thread only.
  Scheduler scheduler_;
  std::unordered_map<RequestId, std::unique_ptr<Sequence>> sequences_;
  uint64_t arrival_counter_ = 0;
  StepPlan plan_;
  std::vector<ScheduledSequence> scheduled_;
  std::vector<SampleRow> rows_;
  std::vector<SampleResult> results_;
  std::deque<InFlightStep> in_flight_;
  std::vector<InFlightStep> spare_steps_;  // reused: no allocation per step
  bool suspended_ = false;                 // since a loss, until the first token after it
  absl::Time lost_at_;
  std::thread thread_;
};

}  // namespace llm
