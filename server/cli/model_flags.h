// Flags shared by every subcommand that loads a model (generate, serve, ...).
#pragma once

#include <string>

#include "engine/distributed/deployment.h"
#include "engine/engine_builder.h"
#include "parallel/mpi_runtime.h"
#include "server/cli/flags.h"

namespace llm::cli {

struct ModelFlags {
  std::string model;
  std::string device = "auto";  // auto: cuda when this build has it and a GPU is usable
  std::string dtype = "auto";
  int64_t threads = 0;
  int64_t max_context = 0;
  int64_t max_seqs = 0;             // 0: from the device and the KV cache (printed at start-up)
  int64_t max_tokens_per_step = 0;  // 0: the engine's default
  int64_t kv_cache_blocks = 0;
  double kv_cache_fraction = 0.9;
  double gpu_memory_fraction = 0.9;
  int64_t block_size = 16;
  int64_t tp = 1;
  int64_t pp = 1;
  std::string layers_per_stage;  // e.g. "10,6": explicit pipeline split
  bool dummy_weights = false;
  bool fixed_kernels = false;
  bool no_overlap = false;
  bool enable_prefix_caching = true;     // on by default; --no-enable-prefix-caching turns it off
  bool no_enable_prefix_caching = false;       // one step at a time (EngineBuildOptions::overlap_steps = false)
  int64_t output_threads = 1;
  std::string quantization = "none";  // none | fp8
  std::string kv_cache_dtype = "auto";
  bool emulate_fp8 = false;
  int64_t max_queue = 1024;      // waiting requests; registered by the commands that queue (serve)

  void Register(FlagSet& flags);
  // Checks values the flag parser cannot (ranges); an error here is a usage error (exit 2).
  absl::Status Validate() const;
  // The model folder to use: --model, else the small model kept in the repository.
  std::string ModelDir() const;
  // --device with "auto" resolved: "cuda" when this build has CUDA and a GPU is visible.
  std::string Device() const;
  EngineBuildOptions ToBuildOptions() const;
  absl::StatusOr<ParallelOptions> ToParallelOptions() const;
  // Launched by mpirun, or asked for more than one rank.
  bool Distributed() const;
};

// The engine a command talks to, in this process alone or on world rank 0 of an mpirun group
// (engine/distributed/deployment.h). On other ranks engine() is null: the command must call
// RunWorker().
absl::StatusOr<std::unique_ptr<Deployment>> Deploy(const ModelFlags& flags, int* argc, char*** argv);

}  // namespace llm::cli
