// What an engine is built from (EngineBuildOptions) and the steps that build one rank's share
// (backend, model runner, engine); EngineGroup (engine/distributed) runs them for every layout,
// a single process included.
#pragma once

#include <filesystem>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "engine/engine.h"
#include "engine/runtime/local_step_executor.h"
#include "engine/tokenizer/tokenizer.h"

namespace llm {

struct EngineBuildOptions {
  std::filesystem::path model_dir;
  std::string device = "cpu";   // cpu | cuda
  std::string dtype = "auto";   // auto | bf16 | fp16 | fp32 (the CPU backend computes in fp32)
  int num_threads = 0;          // CPU backend threads; 0: all cores
  // 0: chosen for the device (ResolveEngineLimits): on CUDA 512 sequences (the most output
  // tokens/s measured on an H100 with an 8B model, benchmarks/RESULTS.md), fewer when the KV cache
  // cannot give each of them kMinTokensPerSequence; on the CPU 64.
  int32_t max_tokens_per_step = 0;
  int32_t max_seqs = 0;
  bool max_seqs_chosen = false;  // set by ResolveEngineLimits when it chose max_seqs
  int32_t block_size = 16;
  int64_t num_kv_blocks = 0;    // 0: from kv_cache_fraction
  // Of the memory the backend can still give once weights, activations and workspaces are in place
  // (Backend::FreeMemory): on CUDA, of what is left of the device arena (gpu_memory_fraction).
  double kv_cache_fraction = 0.9;
  // CUDA: the device arena reserved at start-up for weights, activations, workspaces and the KV
  // cache, as a fraction of the device's total memory, in (0, 1]. Ignored on the CPU.
  double gpu_memory_fraction = 0.9;
  int64_t max_context = 0;      // 0: the model's max_position_embeddings
  int32_t max_queue = 1024;
  bool dummy_weights = false;   // random weights in the config's shapes; no checkpoint files
  // "" / "none", or "fp8": quantize a float checkpoint's linears to FP8 at load (per-channel
  // weights, dynamic per-token activations); FP8 checkpoints load as they are either way. With
  // dummy_weights: FP8 dummy weights in the real shapes.
  std::string quantization;
  // auto | bf16 | fp16 | fp32 | fp8 (see ChooseKvCacheDType).
  std::string kv_cache_dtype = "auto";
  // CPU: emulate the CUDA W8A8 path's activation quantization (CpuBackendOptions).
  bool emulate_fp8_activations = false;
  // CUDA: time the GEMV forms against cuBLASLt per decode linear shape at first use and keep the
  // fastest (CudaBackendOptions::autotune_linear; linears of 1-2 rows take the ring GEMV
  // untimed either way). false: a fixed rule (the GEMV up to 4 rows), so that bf16 outputs do not
  // depend on timing noise between restarts, ranks or pipeline splits.
  bool time_linear_kernels = true;
  int device_index = 0;         // CUDA device (a multi-rank group uses each rank's local rank)
  // Launch each step before collecting the one before it, where the executor can chain steps
  // (EngineOptions::overlap_steps); false: one step at a time (for comparisons).
  bool overlap_steps = true;
  int32_t output_threads = 1;   // EngineOptions::output_threads
  bool prefix_caching = true;   // SchedulerOptions::prefix_caching
};

// The pieces an EngineGroup builds a rank from.
absl::StatusOr<std::unique_ptr<Backend>> BuildBackend(const EngineBuildOptions& options);
absl::StatusOr<std::unique_ptr<ModelRunner>> BuildModelRunner(const EngineBuildOptions& options,
                                                              const ModelConfig& config, const ShardSpec& shard,
                                                              std::unique_ptr<Backend> backend,
                                                              Communicator* tp_comm);
// An engine over `executor`, with limits taken from `runner` (any rank's: they agree) and
// `num_kv_blocks` blocks in the scheduler's pool.
absl::StatusOr<std::unique_ptr<Engine>> BuildEngine(const EngineBuildOptions& options, const ModelConfig& config,
                                                    const ModelRunner& runner, int32_t num_kv_blocks,
                                                    std::unique_ptr<StepExecutor> executor,
                                                    std::shared_ptr<const Tokenizer> tokenizer);

// Fills in the limits left 0 in `options` from the device kind (before the runner is sized).
void ResolveEngineLimits(EngineBuildOptions& options);
// When max_seqs was chosen, not asked for: the KV cache gives each sequence at least this many
// tokens, or the scheduler runs fewer at once (BuildEngine): past that, sequences admitted
// together only preempt each other.
inline constexpr int64_t kMinTokensPerSequence = 256;

// Loads `dir`/tokenizer.json when it exists; null (not an error) when it does not.
absl::StatusOr<std::shared_ptr<const Tokenizer>> LoadTokenizerIfPresent(const std::filesystem::path& dir);

}  // namespace llm
