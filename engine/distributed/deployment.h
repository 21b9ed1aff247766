// Deployment: the engine a command talks to, whatever the layout. One process is a group of one:
// `llm serve` alone and world rank 0 of `mpirun -np TP*PP llm serve --tp T --pp P` take the same
// path (an EngineGroup over this process's MPI world, or a single-process world that makes no MPI
// call), and every other rank of a group runs steps for rank 0 (RunWorker).
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "engine/distributed/engine_group.h"
#include "parallel/mpi_runtime.h"

namespace llm {

// Whether a failed Deployment::Create was given wrong input (flags, the launch, the model folder
// or its config) rather than failing on the machine: commands exit 2 for it, 1 otherwise.
bool IsUsageError(const absl::Status& status);

// The model folder exists, is a folder, and holds a config.json the engine can serve (a usage
// error otherwise, naming the key).
absl::Status CheckModelFolder(const EngineBuildOptions& build);

class Deployment {
 public:
  // Starts MPI when launched by an MPI launcher or asked for more than one rank (argc/argv may be
  // null otherwise), checks that the world has TP x PP ranks (InvalidArgument, naming the mpirun
  // command that fits) and that every rank has the same settings (settings_fingerprint.h), then
  // loads this rank's share (collective). With several ranks, rank 0 prints every rank's memory
  // (stderr): operators check that each holds ~1/(TP*PP). `role`: whether rank 0 runs the engine
  // or serves its steps to a front end (GroupRole).
  static absl::StatusOr<std::unique_ptr<Deployment>> Create(const EngineBuildOptions& build,
                                                            const ParallelOptions& parallel, int* argc = nullptr,
                                                            char*** argv = nullptr,
                                                            GroupRole role = GroupRole::kEngine);
  // Drains the engine, then closes the communicators, then MPI.
  ~Deployment();

  // Null on the worker ranks of a group (they call RunWorker()), and on every rank of a group
  // serving a front end (rank 0 takes group().TakeExecutor()).
  Engine* engine() { return group_->engine(); }
  std::shared_ptr<const Tokenizer> tokenizer() const { return group_->tokenizer(); }
  int rank() const { return group_->topology().rank(); }
  // Ranks other than 0: serve steps until rank 0 shuts the engine down.
  absl::Status RunWorker() { return group_->RunWorker(); }
  EngineGroup& group() { return *group_; }

 private:
  Deployment() = default;
  std::unique_ptr<MpiRuntime> mpi_;
  std::unique_ptr<EngineGroup> group_;
};

}  // namespace llm
