// QuantizationConfig: how a checkpoint's linear layers and KV cache are quantized, read from the
// `quantization_config` of config.json (or ModelOpt's hf_quant_config.json). Four FP8 layouts:
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
// and three 4-bit weight-only (W4A16) layouts, whose tensors engine/model/int4_checkpoint.h reads:
//
//   5. AutoAWQ GEMM (quant_method "awq", bits 4, version "gemm", zero_point true, group_size,
//      modules_to_not_convert): `qweight` i32 [K, N/8], `qzeros` i32 [K/g, N/8], `scales` f16
//      [K/g, N].
//   6. GPTQ (AutoGPTQ, GPTQModel; quant_method "gptq", bits 4, group_size (-1: one group), desc_act,
//      sym, checkpoint_format / format "gptq" (v1: zeros stored minus 1) or "gptq_v2"):
//      `qweight` i32 [K/8, N], `qzeros` i32 [G, N/8], `scales` f16 [G, N], `g_idx` i32 [K].
//   7. compressed-tensors format "pack-quantized" (llm-compressor "W4A16"; weights num_bits 4,
//      type int, strategy group or channel, symmetric or not, actorder): `weight_packed` i32
//      [N, ceil(K/8)], `weight_scale` [N, G], `weight_shape` i64 [2], `weight_zero_point` i32
//      [ceil(N/8), G] when asymmetric, `weight_g_idx` i32 [K] with actorder "group".
//
// Anything else (other block sizes, 3- or 8-bit integers, other AWQ versions, GPTQ's marlin or
// per-module "dynamic" overrides, a quantized LM head, unknown strategies or methods) is an error
// naming the key and the scheme, raised when the config is parsed; the loader
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

enum class QuantMethod { kNone, kFp8, kCompressedTensors, kModelOpt, kAwq, kGptq };
std::string_view QuantMethodName(QuantMethod m);

// The 4-bit packings (layouts 5-7 above).
enum class Int4Packing : uint8_t { kNone, kAwqGemm, kGptq, kCompressedTensors };
std::string_view Int4PackingName(Int4Packing p);  // "AutoAWQ GEMM", "GPTQ", "compressed-tensors pack-quantized"

// How the checkpoint stores one linear layer.
struct LinearScheme {
  bool fp8 = false;  // false: a float weight, no scales (unless int4)
  ScaleGranularity weight_scales = ScaleGranularity::kNone;  // kTensor, kChannel, kBlock or kGroup
  int32_t block_rows = 0, block_cols = 0;                    // kBlock: 128 x 128; kGroup: 0 x 128
  std::string scale_name = "weight_scale";                   // "weight_scale_inv" in layout 1
  ActivationQuant activation = ActivationQuant::kNone;
  int32_t activation_group = 0;  // kDynamicPerGroup
  // 4-bit weights: the packing, the columns per group (0: all of K), zero points (AWQ, GPTQ: the
  // stored ones; compressed-tensors: when not symmetric), GPTQ v1's zeros stored minus 1, and
  // act-order (a g_idx that the checkpoint must carry).
  Int4Packing int4 = Int4Packing::kNone;
  int64_t group_size = 0;
  bool zero_points = false;
  bool zeros_minus_one = false;
  bool act_order = false;
  // For messages: which part of which config declared it, e.g.
  // "compressed-tensors config_groups.group_0 (weights channel, activations dynamic token)".
  std::string description;

  StorageFormat format() const;
  bool quantized() const { return fp8 || int4 != Int4Packing::kNone; }
  // Whether two modules are stored alike (the parts of a fused projection must be).
  bool SameStorage(const LinearScheme& o) const;
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
