#include "engine/distributed/deployment.h"

#include <cstdio>
#include <filesystem>

#include "absl/strings/str_cat.h"

namespace llm {

absl::StatusOr<std::unique_ptr<Deployment>> Deployment::Create(const EngineBuildOptions& build,
                                                               const ParallelOptions& parallel, int* argc,
                                                               char*** argv) {
  if (parallel.tp < 1 || parallel.pp < 1) return absl::InvalidArgumentError("--tp and --pp must be positive");
  if (!build.dummy_weights && !std::filesystem::is_directory(build.model_dir))
    return absl::NotFoundError(absl::StrCat("model folder '", build.model_dir.string(), "' does not exist"));
  const bool distributed = parallel.tp * parallel.pp > 1 || MpiRuntime::LaunchedByMpiLauncher();
  std::unique_ptr<Deployment> d(new Deployment());
  ASSIGN_OR_RETURN(d->mpi_, MpiRuntime::Create(distributed ? MpiMode::kInit : MpiMode::kSingleProcess, argc, argv));
  if (d->mpi_->world_size() != parallel.tp * parallel.pp)
    return absl::InvalidArgumentError(absl::StrCat("launched with ", d->mpi_->world_size(), " ranks but --tp ",
                                                   parallel.tp, " x --pp ", parallel.pp, " needs ",
                                                   parallel.tp * parallel.pp, " (mpirun -np ",
                                                   parallel.tp * parallel.pp, ")"));
  ASSIGN_OR_RETURN(d->group_, EngineGroup::Create(build, parallel, *d->mpi_));
  if (d->mpi_->world_size() > 1) {
    ASSIGN_OR_RETURN(std::vector<ShardMemory> memory, d->group_->MemoryReport());
    if (d->mpi_->world_rank() == 0)
      std::fprintf(stderr, "memory per rank (TP %d x PP %d):\n%s", parallel.tp, parallel.pp,
                   FormatMemoryReport(memory).c_str());
  }
  return d;
}

Deployment::~Deployment() {
  // Engines stop before their communicators, and communicators before MPI finalizes.
  if (group_ && group_->engine()) group_->engine()->Shutdown(true);
  group_.reset();
  mpi_.reset();
}

}  // namespace llm
