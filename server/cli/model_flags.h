// Flags shared by every subcommand that loads a model (generate, serve, ...).
#pragma once

#include <string>

#include "engine/engine_builder.h"
#include "server/cli/flags.h"

namespace llm::cli {

struct ModelFlags {
  std::string model;
  std::string device = "cpu";
  std::string dtype = "auto";
  int64_t threads = 0;
  int64_t max_context = 0;
  int64_t max_seqs = 64;
  int64_t max_tokens_per_step = 2048;
  int64_t kv_cache_blocks = 0;
  double kv_cache_fraction = 0.9;
  int64_t block_size = 16;

  void Register(FlagSet& flags);
  // The model folder to use: --model, else the small model kept in the repository.
  std::string ModelDir() const;
  EngineBuildOptions ToBuildOptions() const;
};

}  // namespace llm::cli
