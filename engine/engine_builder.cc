#include "engine/engine_builder.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "engine/backend/backend_factory.h"
#include "engine/model/dummy_weights.h"

namespace llm {

absl::StatusOr<std::shared_ptr<const Tokenizer>> LoadTokenizerIfPresent(const std::filesystem::path& dir) {
  if (!std::filesystem::exists(dir / "tokenizer.json")) return std::shared_ptr<const Tokenizer>();
  ASSIGN_OR_RETURN(auto tokenizer, Tokenizer::Load(dir));
  return std::shared_ptr<const Tokenizer>(std::move(tokenizer));
}

void ResolveEngineLimits(EngineBuildOptions& o) {
  const bool gpu = o.device != "cpu";
  if (o.max_seqs <= 0) {
    o.max_seqs = gpu ? 512 : 64;
    o.max_seqs_chosen = true;
  }
  // The prefill chunk, measured on an H100 (8B shape, 256 streams of 1000/512, benchmarks/RESULTS.md
  // "Chunked-prefill budget"): 1024 keeps P99 inter-token latency at 1.33x the median TPOT with the
  // best throughput; 2048 gives 1.97x, 4096 3.4x, both no faster. Room for a decode of every
  // sequence as well: at least twice --max-seqs.
  if (o.max_tokens_per_step <= 0) o.max_tokens_per_step = gpu ? std::max<int32_t>(1024, 2 * o.max_seqs) : 2048;
}

absl::StatusOr<std::unique_ptr<Backend>> BuildBackend(const EngineBuildOptions& o) {
  BackendOptions b;
  ASSIGN_OR_RETURN(b.device, ParseDeviceKind(o.device));
  if (o.dtype != "auto") {
    ASSIGN_OR_RETURN(DType dtype, ParseDType(o.dtype));
    b.dtype = dtype;
  }
  b.device_index = o.device_index;
  b.num_threads = o.num_threads;
  b.gpu_memory_fraction = o.gpu_memory_fraction;
  b.time_linear_kernels = o.time_linear_kernels;
  b.emulate_fp8_activations = o.emulate_fp8_activations;
  return CreateBackend(b);
}

absl::StatusOr<std::unique_ptr<ModelRunner>> BuildModelRunner(const EngineBuildOptions& o, const ModelConfig& config,
                                                              const ShardSpec& shard, std::unique_ptr<Backend> backend,
                                                              Communicator* tp_comm) {
  ModelRunnerOptions ro;
  ro.limits.max_tokens = o.max_tokens_per_step;
  ro.limits.max_seqs = o.max_seqs;
  ro.block_size = o.block_size;
  ro.num_kv_blocks = o.num_kv_blocks;
  ro.kv_cache_fraction = o.kv_cache_fraction;
  ro.max_context = o.max_context;
  ro.shard = shard;
  ASSIGN_OR_RETURN(ro.load.quantization, ParseOnlineQuantization(o.quantization));
  ASSIGN_OR_RETURN(ro.kv_cache_dtype, ParseKvCacheDType(o.kv_cache_dtype));
  if (o.dummy_weights) {
    ASSIGN_OR_RETURN(auto weights, CreateDummyWeights(config, shard, *backend, /*seed=*/1234, ro.load));
    return ModelRunner::CreateFromWeights(config, std::move(weights), std::move(backend), tp_comm, ro);
  }
  // The checkpoint's mapping is only needed while loading: weights then live in backend memory.
  ASSIGN_OR_RETURN(auto checkpoint, Checkpoint::Open(o.model_dir));
  return ModelRunner::Create(config, *checkpoint, std::move(backend), tp_comm, ro);
}

EngineInfo DescribeEngine(const EngineBuildOptions& o, const ModelConfig& config, int64_t max_context,
                          int32_t num_kv_blocks) {
  // The scheduler runs no more sequences than the KV cache gives kMinTokensPerSequence each.
  const int64_t kv_tokens = int64_t{num_kv_blocks} * o.block_size;
  EngineInfo info;
  info.config = config;
  info.max_context = max_context;
  info.max_tokens_per_step = o.max_tokens_per_step;
  info.max_seqs =
      o.max_seqs_chosen ? static_cast<int32_t>(std::clamp<int64_t>(kv_tokens / kMinTokensPerSequence, 1, o.max_seqs))
                        : o.max_seqs;
  info.kv_blocks = num_kv_blocks;
  info.kv_block_size = o.block_size;
  return info;
}

EngineOptions EngineOptionsFor(const EngineBuildOptions& o, const EngineInfo& info, int32_t block_table_width) {
  EngineOptions eo;
  eo.max_queue = o.max_queue;
  eo.max_context = info.max_context;
  eo.scheduler.max_tokens_per_step = info.max_tokens_per_step;
  eo.scheduler.max_seqs = info.max_seqs;
  eo.scheduler.block_size = info.kv_block_size;
  eo.scheduler.num_blocks = info.kv_blocks;
  eo.scheduler.block_table_width = block_table_width;
  eo.overlap_steps = o.overlap_steps;
  eo.scheduler.prefix_caching = o.prefix_caching;
  eo.output_threads = o.output_threads;
  return eo;
}

absl::StatusOr<std::unique_ptr<Engine>> BuildEngine(const EngineBuildOptions& o, const ModelConfig& config,
                                                    const ModelRunner& runner, int32_t num_kv_blocks,
                                                    std::unique_ptr<StepExecutor> executor,
                                                    std::shared_ptr<const Tokenizer> tokenizer) {
  const EngineInfo info = DescribeEngine(o, config, runner.max_context(), num_kv_blocks);
  return Engine::Create(info, EngineOptionsFor(o, info, runner.block_table_width()), std::move(executor),
                        std::move(tokenizer));
}

}  // namespace llm
