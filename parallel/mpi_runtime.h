// MpiRuntime: owns MPI for the life of the process (MPI_Init_thread ... MPI_Finalize) and knows
// this process's place in the world: world rank/size and local (same node) rank/size.
//
// Create one in main(), before any communicator, and destroy it after all of them. Two modes:
//   * MpiMode::kInit: initialize MPI. Under `mpirun -np N` the world has N ranks; a plain
//     `./binary` is an MPI singleton (world size 1). MPI_THREAD_MULTIPLE is requested; when the
//     library only provides MPI_THREAD_FUNNELED or SERIALIZED, all MPI calls (every
//     MpiCommunicator operation) must come from the thread that created the runtime.
//     When MPI is already initialized by someone else, it is adopted and not finalized here.
//   * MpiMode::kSingleProcess: never touch MPI. World size 1, rank 0; communicators made from
//     this runtime have size 1 and short-circuit every operation. For CLI tools that must run
//     without an MPI launcher.
// mpi.h is not included here: the MPI handles live in the .cc files.
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "parallel/topology.h"

namespace llm {

enum class MpiMode {
  kInit,           // MPI_Init_thread / MPI_Finalize
  kSingleProcess,  // no MPI at all; world size 1
};

// How long a rank's waits (MPI receives, NCCL stream drains) poll with sched_yield before they
// start to sleep (parallel/internal/backoff.h): 50 ms when every local rank can own two cores
// (its own and one for its helper threads), so that a worker sees each decode step's message
// without a sleep's delay; 1 ms with more ranks than that (oversubscribed test runs), so that
// waiting ranks give their cores to the ones they wait for. `env_us` (LLM_POLL_YIELD_US, in
// microseconds) overrides both when it parses.
absl::Duration ChoosePollYieldWindow(int local_size, unsigned cores, const char* env_us);

class MpiRuntime {
 public:
  // At most one kInit runtime exists at a time (FailedPrecondition otherwise; single-process ones
  // touch no MPI state and may coexist), and MPI cannot be initialized again once finalized
  // (FailedPrecondition). argc/argv may be null.
  static absl::StatusOr<std::unique_ptr<MpiRuntime>> Create(MpiMode mode, int* argc = nullptr,
                                                            char*** argv = nullptr);
  ~MpiRuntime();  // MPI_Finalize when this runtime initialized MPI
  MpiRuntime(const MpiRuntime&) = delete;
  MpiRuntime& operator=(const MpiRuntime&) = delete;

  // True when the environment of this process shows it was started by an MPI launcher
  // (mpirun/mpiexec/srun set OMPI_COMM_WORLD_SIZE, PMI_SIZE or PMIX_RANK). For main() to pick a
  // mode: `LaunchedByMpiLauncher() ? kInit : kSingleProcess`.
  static bool LaunchedByMpiLauncher();

  bool uses_mpi() const { return mode_ == MpiMode::kInit; }
  // Whether concurrent MPI calls from several threads are allowed (MPI_THREAD_MULTIPLE).
  bool thread_multiple() const { return thread_multiple_; }

  int world_rank() const { return world_rank_; }
  int world_size() const { return world_size_; }
  // Rank and number of ranks on this node (MPI_Comm_split_type SHARED).
  int local_rank() const { return local_rank_; }
  int local_size() const { return local_size_; }

  // The topology of this rank for tp x pp (InvalidArgument when world_size != tp * pp).
  absl::StatusOr<Topology> MakeTopology(int tp, int pp) const;

 private:
  explicit MpiRuntime(MpiMode mode) : mode_(mode) {}

  MpiMode mode_;
  bool owns_mpi_ = false;  // this runtime called MPI_Init_thread and so calls MPI_Finalize
  bool thread_multiple_ = false;
  int world_rank_ = 0;
  int world_size_ = 1;
  int local_rank_ = 0;
  int local_size_ = 1;
};

}  // namespace llm
