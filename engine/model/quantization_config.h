// QuantizationConfig: how a checkpoint's linear layers and KV cache are quantized, read from the
// `quantization_config` of config.json (or ModelOpt's hf_quant_config.json) in the four FP8
// layouts that are published:
//
//   1. quant_method "fp8" with weight_block_size [128, 128] (transformers' FP8, DeepSeek-V3,
//      Qwen3-*-FP8): F8_E4M3 `weight` + F32 `weight_scale_inv` [ceil(N/128), ceil(K/128)];
//      activations quantized dynamically per token and 128-column group.
//   2. quant_method "compressed-tensors", format "float-quantized" (llm-compressor): `weight` +
//      `weight_scale` (per tensor, per channel [N, 1], 128x128 blocks or 128-column groups),
//      `input_scale` for static activations; config_groups (targets, weights, input_activations),
//      ignore (names or "re:" patterns), kv_cache_scheme (`self_attn.k_scale` / `v_scale`).
//   3. NVIDIA ModelOpt (hf_quant_config.json quant_algo "FP8", or config.json quant_method
//      "modelopt"): per-tensor `weight_scale` and static `input_scale`, exclude_modules (fnmatch
//      patterns), kv_cache_quant_algo "FP8" with `k_proj.k_scale` / `v_proj.v_scale`.
//   4. AutoFP8 (quant_method "fp8" without a block size): per-tensor `weight_scale`, static
//      `input_scale` (activation_scheme "static") or dynamic per-token activations.
//
// Anything else (other block sizes, 4-bit or integer weights, unknown strategies or methods) is an
// error naming the key and the scheme, raised when the config is parsed; the loader
// (engine/model/weights.cc) then checks each tensor against the scheme its module resolves to.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "engine/core/storage_format.h"

namespace llm {

enum class QuantMethod { kNone, kFp8, kCompressedTensors, kModelOpt };
std::string_view QuantMethodName(QuantMethod m);

// How the checkpoint stores one linear layer.
struct LinearScheme {
  bool fp8 = false;  // false: a float weight, no scales
  ScaleGranularity weight_scales = ScaleGranularity::kNone;  // kTensor, kChannel, kBlock or kGroup
  int32_t block_rows = 0, block_cols = 0;                    // kBlock: 128 x 128; kGroup: 0 x 128
  std::string scale_name = "weight_scale";                   // "weight_scale_inv" in layout 1
  ActivationQuant activation = ActivationQuant::kNone;
  int32_t activation_group = 0;  // kDynamicPerGroup
  // For messages: which part of which config declared it, e.g.
  // "compressed-tensors config_groups.group_0 (weights channel, activations dynamic token)".
  std::string description;

  StorageFormat format() const;
};

struct QuantizationConfig {
  QuantMethod method = QuantMethod::kNone;
  std::string source;  // the file (and key) it was read from

  // The checkpoint declares an FP8 KV cache with static per-tensor k/v scales
  // (kv_cache_scheme, kv_cache_quant_algo "FP8").
  bool kv_cache_fp8 = false;

  // One config group of compressed-tensors (the other methods have one implicit group).
  struct Group {
    std::string name;
    std::vector<std::string> targets;  // "Linear", a module name, or "re:<regex>"
    LinearScheme scheme;
  };
  std::vector<Group> groups;
  // Modules left unquantized: compressed-tensors `ignore` (names, "re:" patterns), ModelOpt
  // `exclude_modules` (fnmatch patterns), fp8 `ignored_layers` / `modules_to_not_convert`
  // (names or name components).
  std::vector<std::string> ignore;

  bool quantized() const { return method != QuantMethod::kNone; }
  // The scheme of the linear module `module` (e.g. "model.layers.3.self_attn.q_proj"; the LM head
  // is "lm_head"): the first group that targets it, unless it is ignored.
  LinearScheme SchemeFor(std::string_view module) const;
};

// Parses config.json's `quantization_config` object (`key_path` "quantization_config"), or a
// whole hf_quant_config.json (`key_path` "", `method_hint` kModelOpt: quant_method is implied).
// `source` is the file; errors name it and the key.
absl::StatusOr<QuantizationConfig> ParseQuantizationConfig(const nlohmann::json& value, const std::string& source,
                                                           const std::string& key_path,
                                                           QuantMethod method_hint = QuantMethod::kNone);

}  // namespace llm
