#include "server/cli/model_flags.h"

#include <filesystem>

namespace llm::cli {

void ModelFlags::Register(FlagSet& f) {
  f.String("model", &model, "Hugging Face model folder (config.json, *.safetensors, tokenizer.json)");
  f.String("device", &device, "cpu or cuda");
  f.String("dtype", &dtype, "auto, bf16, fp16 or fp32 (the CPU backend computes in fp32)");
  f.Int("threads", &threads, "CPU backend threads (0: all cores)");
  f.Int("max-context", &max_context, "longest prompt + output in tokens (0: the model's)");
  f.Int("max-seqs", &max_seqs, "sequences batched per step");
  f.Int("max-tokens-per-step", &max_tokens_per_step, "token budget per step (prefill chunk size)");
  f.Int("kv-cache-blocks", &kv_cache_blocks, "KV cache blocks (0: from --kv-cache-fraction)");
  f.Float("kv-cache-fraction", &kv_cache_fraction, "fraction of free memory for the KV cache");
  f.Int("block-size", &block_size, "tokens per KV cache block");
}

std::string ModelFlags::ModelDir() const {
  if (!model.empty()) return model;
#ifdef LLM_DEFAULT_MODEL_DIR
  return LLM_DEFAULT_MODEL_DIR;
#else
  return "";
#endif
}

EngineBuildOptions ModelFlags::ToBuildOptions() const {
  EngineBuildOptions o;
  o.model_dir = ModelDir();
  o.device = device;
  o.dtype = dtype;
  o.num_threads = static_cast<int>(threads);
  o.max_context = max_context;
  o.max_seqs = static_cast<int32_t>(max_seqs);
  o.max_tokens_per_step = static_cast<int32_t>(max_tokens_per_step);
  o.num_kv_blocks = kv_cache_blocks;
  o.kv_cache_fraction = kv_cache_fraction;
  o.block_size = static_cast<int32_t>(block_size);
  return o;
}

}  // namespace llm::cli
