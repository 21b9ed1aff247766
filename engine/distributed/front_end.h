// The engine of a front end that survives its workers (`llm serve --workers PREFIX`): the
// engine (scheduler, step loop, requests, sampling state and the tokens already sent) runs in
// this ordinary process, outside any MPI job; each replica's steps run in a worker group it
// launches and supervises (WorkerGroupSupervisor), reached through a RemoteStepExecutor. A group
// that dies or hangs is replaced and its requests recomputed, with identical outputs; with several
// replicas the others keep serving meanwhile.
#pragma once

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/distributed/worker_supervisor.h"
#include "engine/engine.h"
#include "engine/engine_builder.h"

namespace llm {

struct FrontEndOptions {
  // The front end's own: the model folder (its config; the workers load the weights), the queue,
  // overlap, prefix caching and output threads of its engine.
  EngineBuildOptions build;
  std::vector<WorkerGroupOptions> replicas;  // one worker group each
};

// Starts every replica's worker group at once and waits for all of them (start-up fails with the
// first error: a refused group, a model that does not load, a launch that does not run), then
// builds the engine over them. `tokenizer` may be null.
absl::StatusOr<std::unique_ptr<Engine>> CreateFrontEndEngine(const FrontEndOptions& options,
                                                             std::shared_ptr<const Tokenizer> tokenizer);

}  // namespace llm
