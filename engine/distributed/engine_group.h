// One rank's share of a tensor x pipeline parallel deployment, launched as
// `mpirun -np TP*PP llm <command> --tp T --pp P`: world rank 0 holds the Engine (scheduler,
// front-end) and runs stage 0 / TP rank 0; every other rank holds a PipelineWorker. Each rank
// loads only its shard: TP slices of its stage's layers.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "engine/engine_builder.h"
#include "engine/distributed/pipeline_executor.h"
#include "parallel/mpi_runtime.h"

namespace llm {

struct ParallelOptions {
  int tp = 1;
  int pp = 1;
  std::vector<int> layers_per_stage;  // empty: balanced split (parallel/topology.h, LmHeadLayerEquivalents)
  absl::Duration comm_timeout = absl::Seconds(300);
};

// The data-plane communicators of one rank: its TP group and its PP group (group rank = stage).
// On a device backend they are NCCL communicators enqueueing on the backend's stream, the TP one
// with small (decode) all-reduces as one kernel over NVLink peer memory wherever every rank of the
// group can map the others' (parallel/nvlink_communicator.h); on a host backend they are the MPI
// groups themselves. `groups` must outlive them.
class DataPlane {
 public:
  // Collective over groups.tp and groups.pp. `device` is this rank's CUDA device.
  static absl::StatusOr<DataPlane> Create(ParallelGroups& groups, Backend& backend, int device,
                                          absl::Duration timeout);
  Communicator* tp() const { return device_tp_ ? device_tp_.get() : host_tp_; }
  Communicator* pp() const { return device_pp_ ? device_pp_.get() : host_pp_; }
  // Which all-reduce the TP group uses, for the log ("one-shot over NVLink up to 1024 KiB, ...").
  const std::string& tp_all_reduce() const { return tp_all_reduce_; }

 private:
  Communicator* host_tp_ = nullptr;
  Communicator* host_pp_ = nullptr;
  std::unique_ptr<Communicator> device_tp_, device_pp_;
  std::string tp_all_reduce_ = "MPI";
};

// One rank's device (or host) memory after loading: what its shard takes.
struct ShardMemory {
  int rank = 0, stage = 0, tp_rank = 0;
  int64_t first_layer = 0, end_layer = 0;
  int64_t weight_bytes = 0, kv_cache_bytes = 0, activation_bytes = 0;
  int64_t free_bytes = 0;  // left on the device (or host) after loading
};

// What world rank 0 of a group does: run the engine (scheduler, step loop) itself, or serve the
// steps of an engine that runs in a front end outside the group (`llm worker`, launched by
// `llm serve --workers`): then rank 0 keeps the group's executor for a StepServer.
enum class GroupRole { kEngine, kServeFrontEnd };

// What a front end's engine needs of a group serving it: its limits and how its executor runs.
struct GroupLimits {
  EngineInfo info;                // config, context, step budget, sequences, KV blocks
  int32_t block_table_width = 0;  // the runners' block table row
  int32_t max_in_flight = 1;      // StepExecutor::max_in_flight()
  bool chains_steps = false;      // StepExecutor::chains_steps()
};

class EngineGroup {
 public:
  // Collective over the world: every rank must call it. A rank that fails to load makes every
  // rank return an error (naming the failing rank) instead of hanging.
  static absl::StatusOr<std::unique_ptr<EngineGroup>> Create(const EngineBuildOptions& options,
                                                             const ParallelOptions& parallel, const MpiRuntime& mpi,
                                                             GroupRole role = GroupRole::kEngine);
  ~EngineGroup();

  bool is_scheduler() const { return engine_ != nullptr; }
  Engine* engine() { return engine_.get(); }  // world rank 0 only (GroupRole::kEngine)
  // World rank 0 of a GroupRole::kServeFrontEnd group: the executor that runs the front end's
  // steps over the whole group (once; null afterwards and on other ranks), and its limits.
  std::unique_ptr<StepExecutor> TakeExecutor() { return std::move(remote_executor_); }
  const GroupLimits& limits() const { return limits_; }
  // Rank 0: drains and destroys the engine, which stops the workers.
  void ShutdownEngine();
  std::shared_ptr<const Tokenizer> tokenizer() const { return tokenizer_; }
  const Topology& topology() const { return topology_; }
  size_t weight_bytes() const { return weight_bytes_; }
  // Collective over the world: every rank's ShardMemory, in rank order, on every rank.
  absl::StatusOr<std::vector<ShardMemory>> MemoryReport();
  // Ranks other than 0: serve steps until rank 0 shuts the engine down.
  absl::Status RunWorker();
  // When this rank's stage ran each micro-batch (for pipeline timelines).
  const std::vector<StageSpan>& timeline() const;
  MpiCommunicator& world() { return *groups_.world; }

 private:
  EngineGroup() = default;
  // This rank's backend, communicators and model shard.
  absl::StatusOr<std::unique_ptr<ModelRunner>> LoadShard(EngineBuildOptions options, const ParallelOptions& parallel,
                                                         const ModelConfig& config);
  Topology topology_ = Topology::Single();
  ParallelGroups groups_;
  std::unique_ptr<MpiCommunicator> steps_comm_, results_comm_;
  DataPlane data_;
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<StepExecutor> remote_executor_;  // rank 0 of a kServeFrontEnd group, until taken
  GroupLimits limits_;
  std::unique_ptr<PipelineWorker> worker_;
  PipelineStepExecutor* executor_ = nullptr;  // owned by engine_
  std::vector<StageSpan> timeline_;            // rank 0's, kept when the engine is gone
  std::shared_ptr<const Tokenizer> tokenizer_;
  size_t weight_bytes_ = 0;
  ShardMemory memory_;
};

// A markdown table of the report, with totals and each rank's share of the whole.
std::string FormatMemoryReport(const std::vector<ShardMemory>& report);

}  // namespace llm
