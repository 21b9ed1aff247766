#include "engine/distributed/deployment.h"

#include <cstdio>
#include <filesystem>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "engine/distributed/settings_fingerprint.h"

namespace llm {

namespace {

constexpr char kUsagePayload[] = "llm.usage_error";

absl::Status Usage(absl::Status status) {
  status.SetPayload(kUsagePayload, absl::Cord("1"));
  return status;
}

}  // namespace

bool IsUsageError(const absl::Status& status) { return status.GetPayload(kUsagePayload).has_value(); }

absl::Status CheckModelFolder(const EngineBuildOptions& build) {
  std::error_code ec;
  const std::filesystem::path& dir = build.model_dir;
  if (!std::filesystem::exists(dir, ec))
    return Usage(absl::NotFoundError(absl::StrCat("model folder '", dir.string(), "' does not exist")));
  if (!std::filesystem::is_directory(dir, ec))
    return Usage(absl::InvalidArgumentError(
        absl::StrCat("--model '", dir.string(),
                     "' is a file; --model takes the folder that holds config.json, the *.safetensors weights and "
                     "tokenizer.json")));
  // A config the engine cannot serve is the operator's input too: refused before anything loads.
  absl::StatusOr<ModelConfig> config = LoadModelConfig(dir);
  if (!config.ok()) return Usage(config.status());
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Deployment>> Deployment::Create(const EngineBuildOptions& build,
                                                               const ParallelOptions& parallel, int* argc,
                                                               char*** argv, GroupRole role) {
  if (parallel.tp < 1 || parallel.pp < 1) return Usage(absl::InvalidArgumentError("--tp and --pp must be positive"));
  RETURN_IF_ERROR(CheckModelFolder(build));
  const bool distributed = parallel.tp * parallel.pp > 1 || MpiRuntime::LaunchedByMpiLauncher();
  std::unique_ptr<Deployment> d(new Deployment());
  ASSIGN_OR_RETURN(d->mpi_, MpiRuntime::Create(distributed ? MpiMode::kInit : MpiMode::kSingleProcess, argc, argv));
  if (d->mpi_->world_size() != parallel.tp * parallel.pp)
    return Usage(absl::InvalidArgumentError(absl::StrCat("launched with ", d->mpi_->world_size(), " ranks but --tp ",
                                                         parallel.tp, " x --pp ", parallel.pp, " needs ",
                                                         parallel.tp * parallel.pp, " (mpirun -np ",
                                                         parallel.tp * parallel.pp, ")")));
  if (d->mpi_->world_size() > 1) {
    // Before anything collective that settings shape: ranks that disagree would load, then reject
    // each other's steps.
    absl::StatusOr<SettingsFingerprint> mine = ComputeSettingsFingerprint(build, parallel);
    if (!mine.ok()) mine = SettingsFingerprint{{"model files", absl::StrCat("unreadable: ", mine.status().message())}};
    MpiCommOptions comm;
    comm.timeout = parallel.comm_timeout;
    ASSIGN_OR_RETURN(std::unique_ptr<MpiCommunicator> world, MpiCommunicator::World(*d->mpi_, comm));
    if (absl::Status agreed = AgreeOnSettings(*world, *mine); !agreed.ok())
      return absl::IsInvalidArgument(agreed) ? Usage(agreed) : agreed;
  }
  ASSIGN_OR_RETURN(d->group_, EngineGroup::Create(build, parallel, *d->mpi_, role));
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
