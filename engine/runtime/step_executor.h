// StepExecutor: runs StepPlans somewhere, on this process's ModelRunner or spread over the ranks
// of a tensor/pipeline-parallel group. The engine does not know which. Launch enqueues a step and
// returns; Collect waits for the oldest launched step and returns its samples. Up to
// max_in_flight() steps may be launched and not yet collected, so that the host plans and
// launches step N+1 while the devices run step N.
#pragma once

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "engine/backend/backend.h"
#include "engine/model/step_plan.h"

namespace llm {

// Where one collected step spent its time on the device that samples it.
struct StepDeviceTiming {
  double device_ms = 0;  // from the step's metadata upload to its last sample copy
  double idle_ms = 0;    // the device's idle gap between the previous step's end and this one's start
  bool valid = false;    // false: the executor could not time this step
};

class StepExecutor {
 public:
  virtual ~StepExecutor() = default;
  // `rows` need only stay valid during the call.
  virtual absl::Status Launch(const StepPlan& plan, absl::Span<const SampleRow> rows) = 0;
  // Results of the oldest launched step, one per row it was launched with.
  virtual absl::Status Collect(absl::Span<SampleResult> results, StepDeviceTiming* timing) = 0;
  // Launched steps that may be outstanding: 2 for overlapped steps on one stage, PP for a
  // pipeline's micro-batches.
  virtual int max_in_flight() const = 0;
  // Whether a step may feed a sequence the token that the step before it samples (a placeholder
  // in the plan, resolved on the device; StepPlan). Executors whose steps all run in one stream
  // order can; a pipeline, whose last stage samples, cannot.
  virtual bool chains_steps() const = 0;

  // Whether this executor's workers can be lost and replaced (RemoteStepExecutor: a worker group
  // outside this process). Then a step that fails with Unavailable is such a loss: whatever the
  // launched steps wrote on the device is gone, but the engine keeps every request and
  // recomputes it on the new workers (engine/README.md, "Surviving the loss of the workers");
  // any other failure fails the requests.
  virtual bool recovers() const { return false; }
  // Whether steps can run now: false from a loss until new workers serve. Any thread may ask.
  virtual bool available() const { return true; }
  // OK while the executor serves, or is getting new workers; the reason once it never will again
  // (communicators broken by an abandoned step, restarts given up). Any thread may ask.
  virtual absl::Status health() const { return absl::OkStatus(); }

  absl::Status Execute(const StepPlan& plan, absl::Span<const SampleRow> rows, absl::Span<SampleResult> results) {
    RETURN_IF_ERROR(Launch(plan, rows));
    return Collect(results, nullptr);
  }
};

}  // namespace llm
