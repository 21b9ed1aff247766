// Test helper: the small engine the engine tests deploy on the CPU, and their greedy request.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "engine/engine_builder.h"
#include "engine/request.h"

namespace llm::testing {

// A short context and step budget, so that long prompts are chunked across steps; the KV cache from
// a tiny fraction of memory, or exactly `kv_blocks` blocks (to force preemption).
inline EngineBuildOptions SmallEngineOptions(const std::string& model_dir, int64_t kv_blocks = 0) {
  EngineBuildOptions o;
  o.model_dir = model_dir;
  o.num_threads = 2;
  o.max_context = 256;
  o.max_seqs = 32;
  o.max_tokens_per_step = 96;
  o.num_kv_blocks = kv_blocks;
  o.kv_cache_fraction = 0.01;
  o.max_queue = 256;
  return o;
}

// Greedy decoding of token ids for exactly `max_tokens` tokens (EOS ignored), no text.
inline GenerateRequest GreedyRequest(std::vector<int32_t> prompt, int max_tokens) {
  GenerateRequest r;
  r.prompt_tokens = std::move(prompt);
  r.sampling.temperature = 0.0f;
  r.stop.max_tokens = max_tokens;
  r.stop.ignore_eos = true;
  r.detokenize = false;
  return r;
}

}  // namespace llm::testing
