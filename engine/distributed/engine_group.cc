#include "engine/distributed/engine_group.h"

#include <algorithm>
#include <cstdio>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "parallel/nccl_communicator.h"
#include "parallel/nvlink_communicator.h"

namespace llm {
namespace {

// Every rank contributes its status; all learn the first failure, so nobody hangs in a later
// collective waiting for a rank that gave up.
absl::Status AgreeOnStatus(MpiCommunicator& world, const absl::Status& local, const char* what) {
  std::vector<int32_t> failed(world.size());
  int32_t mine = local.ok() ? 0 : 1;
  RETURN_IF_ERROR(world.AllGather(&mine, failed.data(), 1, DType::kI32));
  if (!local.ok()) return absl::Status(local.code(), absl::StrCat("rank ", world.rank(), ": ", local.message()));
  for (int r = 0; r < world.size(); ++r)
    if (failed[r]) return absl::AbortedError(absl::StrCat(what, " failed on rank ", r, " (see its message)"));
  return absl::OkStatus();
}

}  // namespace

EngineGroup::~EngineGroup() {
  // The engine's executor sends the stop message when destroyed; engines before communicators.
  engine_.reset();
  remote_executor_.reset();
  worker_.reset();
  data_ = DataPlane();
}

absl::StatusOr<DataPlane> DataPlane::Create(ParallelGroups& groups, Backend& backend, int device,
                                             absl::Duration timeout) {
  DataPlane d;
  d.host_tp_ = groups.tp.get();
  d.host_pp_ = groups.pp.get();
  if (backend.device().kind != DeviceKind::kCuda) return d;
  NcclOptions nccl;
  nccl.device = device;
  nccl.timeout = timeout;
  ASSIGN_OR_RETURN(std::unique_ptr<DeviceCommunicator> nccl_tp,
                   CreateNcclCommunicator(*groups.tp, backend.native_stream(), nccl));
  ASSIGN_OR_RETURN(d.device_pp_, CreateNcclCommunicator(*groups.pp, backend.native_stream(), nccl));
  NvlinkSetup setup;
  ASSIGN_OR_RETURN(d.device_tp_, CreateNvlinkCommunicator(*groups.tp, std::move(nccl_tp), NvlinkOptions{}, &setup));
  d.tp_all_reduce_ = setup.one_shot ? absl::StrCat("one-shot over NVLink up to ", setup.capacity_bytes >> 10,
                                                   " KiB, NCCL above",
                                                   setup.fused_add_rms_norm
                                                       ? absl::StrCat("; fused with the residual add and RMSNorm from ",
                                                                      NvlinkOptions{}.fuse_min_rows, " rows")
                                                       : "")
                                    : absl::StrCat("NCCL (", setup.reason, ")");
  return d;
}

absl::StatusOr<std::unique_ptr<EngineGroup>> EngineGroup::Create(const EngineBuildOptions& options,
                                                                 const ParallelOptions& parallel,
                                                                 const MpiRuntime& mpi, GroupRole role) {
  std::unique_ptr<EngineGroup> g(new EngineGroup());
  ASSIGN_OR_RETURN(g->topology_, mpi.MakeTopology(parallel.tp, parallel.pp));
  MpiCommOptions comm_options;
  comm_options.timeout = parallel.comm_timeout;
  ASSIGN_OR_RETURN(g->groups_, MakeParallelGroups(mpi, g->topology_, comm_options));
  MpiCommunicator& world = *g->groups_.world;
  const Topology& t = g->topology_;

  // Load this rank's shard; agree on success before anyone goes on.
  EngineBuildOptions o = options;
  ResolveEngineLimits(o);
  if (o.num_threads <= 0)  // share the node's cores between its ranks
    o.num_threads = std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / t.local_size());
  absl::StatusOr<ModelConfig> config = LoadModelConfig(o.model_dir);
  absl::StatusOr<std::unique_ptr<ModelRunner>> runner =
      config.ok() ? g->LoadShard(o, parallel, *config) : absl::StatusOr<std::unique_ptr<ModelRunner>>(config.status());
  absl::StatusOr<std::shared_ptr<const Tokenizer>> tokenizer = std::shared_ptr<const Tokenizer>();
  // A group serving a front end never sees text: the front end tokenizes.
  if (t.rank() == 0 && runner.ok() && role == GroupRole::kEngine) tokenizer = LoadTokenizerIfPresent(o.model_dir);
  RETURN_IF_ERROR(AgreeOnStatus(world, runner.ok() ? tokenizer.status() : runner.status(), "loading the model"));
  g->tokenizer_ = *tokenizer;
  g->weight_bytes_ = (*runner)->weight_bytes();
  {
    const ModelRunner& r = **runner;
    ShardMemory& m = g->memory_;
    m.rank = t.rank();
    m.stage = t.pp_stage();
    m.tp_rank = t.tp_rank();
    m.first_layer = r.dims().first_layer;
    m.end_layer = r.dims().end_layer;
    m.weight_bytes = static_cast<int64_t>(r.weight_bytes());
    m.kv_cache_bytes = static_cast<int64_t>(r.kv_cache_bytes());
    m.activation_bytes = static_cast<int64_t>(r.activation_bytes());
    absl::StatusOr<size_t> free_bytes = (*runner)->backend().FreeMemory();
    m.free_bytes = free_bytes.ok() ? static_cast<int64_t>(*free_bytes) : -1;
  }

  // The scheduler's pool may only use blocks that exist on every rank.
  std::vector<int32_t> blocks(world.size());
  const int32_t mine = static_cast<int32_t>((*runner)->kv_shape().num_blocks);
  RETURN_IF_ERROR(world.AllGather(&mine, blocks.data(), 1, DType::kI32));
  const int32_t num_blocks = *std::min_element(blocks.begin(), blocks.end());

  // Two control communicators, one per thread that uses them on rank 0 (the engine thread sends
  // steps, a receiver thread takes sampled tokens). Waiting for the next step (or result) has no
  // deadline: an idle server is not a failure. Sending one has the communication deadline: a rank
  // that stopped taking steps (hung, SIGSTOP) fails the step instead of blocking the engine thread.
  ASSIGN_OR_RETURN(g->steps_comm_, world.Split(0, t.rank(), "steps"));
  ASSIGN_OR_RETURN(g->results_comm_, world.Split(0, t.rank(), "results"));
  g->steps_comm_->set_receive_timeout(absl::InfiniteDuration());
  g->results_comm_->set_receive_timeout(absl::InfiniteDuration());
  PipelineGroup pg{t, g->steps_comm_.get(), g->results_comm_.get(), g->data_.pp()};
  if (role == GroupRole::kServeFrontEnd) {
    if (t.rank() != 0) {
      g->worker_ = std::make_unique<PipelineWorker>(std::move(*runner), pg);
      return g;
    }
    const ModelRunner& r = **runner;
    g->limits_.info = DescribeEngine(o, *config, r.max_context(), num_blocks);
    g->limits_.block_table_width = r.block_table_width();
    if (t.world_size() == 1) {
      g->remote_executor_ = std::make_unique<LocalStepExecutor>(std::move(*runner));
    } else {
      g->remote_executor_ = std::make_unique<PipelineStepExecutor>(std::move(*runner), pg);
    }
    g->limits_.max_in_flight = g->remote_executor_->max_in_flight();
    g->limits_.chains_steps = g->remote_executor_->chains_steps();
    return g;
  }
  if (t.world_size() == 1) {  // a group of one: no step messages to send
    const ModelRunner& r = **runner;
    ASSIGN_OR_RETURN(g->engine_, BuildEngine(o, *config, r, num_blocks,
                                             std::make_unique<LocalStepExecutor>(std::move(*runner)), g->tokenizer_));
  } else if (t.rank() == 0) {
    const ModelRunner& r = **runner;
    auto executor = std::make_unique<PipelineStepExecutor>(std::move(*runner), pg);
    g->executor_ = executor.get();
    ASSIGN_OR_RETURN(g->engine_, BuildEngine(o, *config, r, num_blocks, std::move(executor), g->tokenizer_));
  } else {
    g->worker_ = std::make_unique<PipelineWorker>(std::move(*runner), pg);
  }
  return g;
}

absl::StatusOr<std::vector<ShardMemory>> EngineGroup::MemoryReport() {
  MpiCommunicator& world = *groups_.world;
  const ShardMemory& m = memory_;
  const int64_t mine[] = {m.rank,           m.stage,          m.tp_rank,          m.first_layer, m.end_layer,
                          m.weight_bytes,   m.kv_cache_bytes, m.activation_bytes, m.free_bytes};
  constexpr int kFields = sizeof(mine) / sizeof(mine[0]);
  std::vector<int64_t> all(static_cast<size_t>(world.size()) * kFields);
  RETURN_IF_ERROR(world.AllGather(mine, all.data(), kFields, DType::kI64));
  std::vector<ShardMemory> report(world.size());
  for (int r = 0; r < world.size(); ++r) {
    const int64_t* v = &all[static_cast<size_t>(r) * kFields];
    report[r] = ShardMemory{static_cast<int>(v[0]), static_cast<int>(v[1]), static_cast<int>(v[2]), v[3], v[4], v[5],
                            v[6],                   v[7],                   v[8]};
  }
  return report;
}

std::string FormatMemoryReport(const std::vector<ShardMemory>& report) {
  auto gb = [](int64_t b) { return absl::StrFormat("%.3f", b / 1e9); };
  int64_t weights = 0, kv = 0;
  for (const ShardMemory& m : report) {
    weights += m.weight_bytes;
    kv += m.kv_cache_bytes;
  }
  std::string out =
      "| rank | stage | tp rank | layers | weights GB | share of all weights | KV cache GB | activations GB | free GB |\n"
      "| --- | --- | --- | --- | --- | --- | --- | --- | --- |\n";
  for (const ShardMemory& m : report)
    absl::StrAppend(&out, "| ", m.rank, " | ", m.stage, " | ", m.tp_rank, " | ", m.first_layer, "-", m.end_layer - 1,
                    " | ", gb(m.weight_bytes), " | ",
                    absl::StrFormat("%.1f%%", weights > 0 ? 100.0 * m.weight_bytes / weights : 0.0), " | ",
                    gb(m.kv_cache_bytes), " | ", gb(m.activation_bytes), " | ",
                    m.free_bytes >= 0 ? gb(m.free_bytes) : std::string("?"), " |\n");
  absl::StrAppend(&out, "| all | | | | ", gb(weights), " | 100% | ", gb(kv), " | | |\n");
  return out;
}

void EngineGroup::ShutdownEngine() {
  if (!engine_) return;
  engine_->Shutdown(true);
  if (executor_) timeline_ = executor_->timeline();
  executor_ = nullptr;
  engine_.reset();
}

const std::vector<StageSpan>& EngineGroup::timeline() const {
  if (worker_) return worker_->timeline();
  return executor_ ? executor_->timeline() : timeline_;
}

absl::StatusOr<std::unique_ptr<ModelRunner>> EngineGroup::LoadShard(EngineBuildOptions o,
                                                                     const ParallelOptions& parallel,
                                                                     const ModelConfig& config) {
  const Topology& t = topology_;
  ASSIGN_OR_RETURN(LayerRange layers,
                   StageLayers(static_cast<int>(config.num_layers), t.pp_size(), t.pp_stage(), parallel.layers_per_stage,
                               LmHeadLayerEquivalents(config)));
  ShardSpec shard;
  shard.tp_rank = t.tp_rank();
  shard.tp_size = t.tp_size();
  shard.first_layer = layers.begin;
  shard.end_layer = layers.end;
  o.device_index = t.device();
  ASSIGN_OR_RETURN(std::unique_ptr<Backend> backend, BuildBackend(o));
  ASSIGN_OR_RETURN(data_, DataPlane::Create(groups_, *backend, t.device(), parallel.comm_timeout));
  if (t.tp_size() > 1 && t.rank() == 0)
    std::fprintf(stderr, "tensor parallel all-reduce: %s\n", data_.tp_all_reduce().c_str());
  return BuildModelRunner(o, config, shard, std::move(backend), data_.tp());
}

absl::Status EngineGroup::RunWorker() {
  if (!worker_) return absl::FailedPreconditionError("world rank 0 runs the engine, not a worker");
  return worker_->Run();
}

}  // namespace llm
