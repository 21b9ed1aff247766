// ModelConfig: the decoder's shape and variant, read from a Hugging Face config.json as published
// (both the older `rope_theta`/`rope_scaling`/`torch_dtype` and newer `rope_parameters`/`dtype`
// key styles). One decoder is parameterized by this struct; there is no file per model.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/model/quantization_config.h"
#include "kernels/core/dtype.h"

namespace llm {

enum class Architecture { kLlama, kMistral, kQwen2, kQwen3 };
std::string_view ArchitectureName(Architecture a);  // the HF class name, e.g. "LlamaForCausalLM"

enum class RopeType { kDefault, kLinear, kLlama3, kYarn, kDynamic };

struct RopeScaling {
  RopeType type = RopeType::kDefault;
  double factor = 1.0;
  // llama3
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position_embeddings = 0;  // 0: not given
  // yarn
  double beta_fast = 32.0;
  double beta_slow = 1.0;
  std::optional<double> attention_factor;  // yarn mscale override
};

struct ModelConfig {
  Architecture architecture = Architecture::kLlama;
  std::string model_type;  // "llama", "mistral", "qwen2", "qwen3"

  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_layers = 0;
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;  // defaults to num_heads when absent
  int64_t head_dim = 0;      // explicit `head_dim`, else hidden_size / num_heads
  int64_t vocab_size = 0;
  int64_t max_position_embeddings = 0;

  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  double partial_rotary_factor = 1.0;  // rotary_dim = head_dim * factor (1.0 for all supported models)

  bool tie_word_embeddings = false;
  bool qkv_bias = false;   // Qwen2 always; Llama/Mistral when attention_bias
  bool o_bias = false;     // Llama/Mistral when attention_bias
  bool mlp_bias = false;   // Llama when mlp_bias
  bool qk_norm = false;    // Qwen3: per-head RMSNorm on q and k before RoPE
  int64_t sliding_window = 0;  // 0: full attention

  DType stored_dtype = DType::kF32;  // torch_dtype / dtype (of the unquantized tensors)
  // quantization_config (or ModelOpt's hf_quant_config.json): FP8 linears and KV cache scales.
  QuantizationConfig quantization;

  std::optional<int32_t> bos_token_id;
  std::vector<int32_t> eos_token_ids;  // config.json, extended by generation_config.json

  int64_t q_size() const { return num_heads * head_dim; }
  int64_t kv_size() const { return num_kv_heads * head_dim; }
};

// The longest context a config may declare (max_position_embeddings) or a server may be asked
// for (--max-context): positions are 32-bit on every device, and each sequence's block table row
// is sized for it (2^24 tokens: 1M blocks of 16, 4 MiB a sequence).
inline constexpr int64_t kMaxContextLength = int64_t{1} << 24;

// The LM head (vocab x hidden) in units of one decoder layer's weights (attention and MLP
// projections): what the last pipeline stage streams beyond its layers each step (about 2.4 for
// Llama-3-8B, 1.2 for Llama-3-70B). The default pipeline split (parallel/topology.h) balances
// stages with it.
double LmHeadLayerEquivalents(const ModelConfig& config);

// Parses config.json text. `source` names the file in error messages. Validates every field the
// decoder needs (positive sizes, heads dividing, supported activation and rope type), that
// model_type is given and supported, that special-token ids lie inside the vocabulary and that
// the context length is at most kMaxContextLength; errors name the key.
absl::StatusOr<ModelConfig> ParseModelConfig(std::string_view json_text, std::string_view source);

// Reads `dir`/config.json and, when present, `dir`/generation_config.json (its eos_token_id,
// int or list, is merged into eos_token_ids) and, when config.json has no quantization_config,
// ModelOpt's `dir`/hf_quant_config.json.
absl::StatusOr<ModelConfig> LoadModelConfig(const std::filesystem::path& dir);

}  // namespace llm
