// Typed weights of one pipeline stage of one tensor-parallel rank, in the backend's memory.
// The loader reads each rank's slices straight out of the memory-mapped checkpoint:
//   column-parallel (output rows split):  fused QKV, fused gate/up, vocab rows of embedding/lm_head
//   row-parallel (input columns split):   o_proj, down_proj (their bias added by TP rank 0 only)
// KV heads fewer than TP ranks are replicated: rank r uses KV head r / (tp / num_kv_heads).
//
// Each linear's storage format is decided here, once, and declared in its LinearWeight:
//  - FP8 checkpoints (engine/model/quantization_config.h) keep their E4M3 bytes and scales, sliced
//    with their rows / columns: per-channel scales with their rows, 128x128 block scales with
//    their blocks. Fused parts with different per-tensor scales (q/k/v, gate/up) get per-channel
//    scales (each row its part's scale: exact, N floats); blocks that a fused part or a TP slice
//    starts mid-way become per-row 128-column groups (exact; N * K / 128 floats instead of
//    N * K / 16384). A TP slice of K that is not on a 128-column boundary is an error naming the
//    layer. Static input scales of fused parts are merged by taking the largest (inputs that fit
//    the largest range fit; the others lose at most the ratio of the scales in resolution).
//  - Float checkpoints keep their float type when the backend takes it, else the backend's
//    activation dtype; with LoadOptions::quantization kFp8 their linears (not the LM head) are
//    quantized here to FP8 with one scale per output row, the row's amax over the whole
//    checkpoint row / 448 (so that every TP layout holds the same values), and dynamic per-token
//    activations (vLLM's online FP8).
//  - A backend that does not take an FP8 format gets the weights dequantized to its activation
//    dtype (Backend::SupportsLinearFormat).
//  - 4-bit checkpoints (AutoAWQ GEMM, GPTQ, compressed-tensors pack-quantized) are read as their
//    producers pack them (int4_checkpoint.h) and repacked into the int4 layout of
//    engine/core/storage_format.h (int4_repack.h): float32 scales where the backend takes them,
//    else float16, else the values dequantized. Row-parallel slices of K keep whole groups (an
//    error names the layer otherwise) unless act-order sorts them by group.
// The LM head and the embedding are never FP8 or 4-bit: a quantized LM head in a checkpoint is an
// error.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/backend/backend.h"
#include "engine/model/checkpoint.h"
#include "engine/model/config.h"

namespace llm {

// Which part of the model this process holds.
struct ShardSpec {
  int tp_rank = 0;
  int tp_size = 1;
  int64_t first_layer = 0;
  int64_t end_layer = -1;  // exclusive; -1: all layers
  bool first_stage() const { return first_layer == 0; }
};

// Per-rank sizes derived from the config and the shard.
struct LocalDims {
  int64_t hidden = 0;
  int64_t head_dim = 0;
  int64_t num_heads = 0;     // local query heads
  int64_t num_kv_heads = 0;  // local KV heads (replicated when fewer than TP)
  int64_t ffn = 0;           // local intermediate size
  int64_t vocab = 0;         // full vocabulary
  int64_t vocab_local = 0;   // rows of this rank's embedding/lm_head shard (padded)
  int64_t vocab_offset = 0;  // first vocabulary id of this rank's shard
  int64_t first_layer = 0;
  int64_t end_layer = 0;
  bool is_first_stage = true;
  bool is_last_stage = true;

  int64_t qkv_size() const { return (num_heads + 2 * num_kv_heads) * head_dim; }
};

absl::StatusOr<LocalDims> ComputeLocalDims(const ModelConfig& config, const ShardSpec& shard);

// Quantization applied while loading a float checkpoint (--quantization). kInt4 makes 4-bit
// (W4A16, symmetric, groups of 128) dummy weights only: 4-bit checkpoints come from their
// producers (or tools/w4a16/quantize.py) and load as published.
enum class OnlineQuantization { kNone, kFp8, kInt4 };
// "" / "none" -> kNone, "fp8" -> kFp8, "int4" / "w4a16" -> kInt4.
absl::StatusOr<OnlineQuantization> ParseOnlineQuantization(std::string_view name);

struct LoadOptions {
  OnlineQuantization quantization = OnlineQuantization::kNone;
};

struct LayerWeights {
  Tensor input_norm;            // [hidden]
  LinearWeight qkv;             // [(heads + 2 kv_heads) * head_dim, hidden]
  Tensor q_norm;                // [head_dim] (Qwen3) or empty
  Tensor k_norm;                // [head_dim] (Qwen3) or empty
  LinearWeight o_proj;          // [hidden, heads * head_dim]
  Tensor post_attention_norm;   // [hidden]
  LinearWeight gate_up;         // [2 * ffn, hidden]: gate rows, then up rows
  LinearWeight down;            // [hidden, ffn]
  // Per-tensor FP8 KV cache scales from the checkpoint (ModelOpt `k_proj.k_scale`,
  // compressed-tensors `self_attn.k_scale`, ...); 1.0 when it has none.
  bool has_kv_scales = false;
  float k_scale = 1.0f;
  float v_scale = 1.0f;
};

struct ModelWeights {
  Buffer memory;                // owns everything below
  Tensor embedding;             // [vocab_local, hidden] (first stage, or last stage when tied)
  std::vector<LayerWeights> layers;  // this stage's layers, in order
  Tensor final_norm;            // [hidden] (last stage)
  LinearWeight lm_head;         // [vocab_local, hidden] (last stage)
  size_t bytes = 0;             // weight bytes held by this rank
  // Whether every layer of this stage has k/v scales from the checkpoint.
  bool has_kv_scales() const {
    for (const LayerWeights& l : layers)
      if (!l.has_kv_scales) return false;
    return !layers.empty();
  }
};

// Reads, slices, converts and uploads this shard's weights. Every tensor is checked for presence,
// shape and dtype (FP8 weights and their scales against the scheme the quantization config
// declares for their module); errors name the tensor, its file and the scheme.
absl::StatusOr<std::unique_ptr<ModelWeights>> LoadWeights(const ModelConfig& config, const Checkpoint& checkpoint,
                                                          const ShardSpec& shard, Backend& backend,
                                                          const LoadOptions& options = {});

namespace internal {
// The loader with its inputs made explicit, so that LoadWeights and CreateDummyWeights
// (dummy_weights.h) share one shape/sharding/format plan.
enum class TensorKind {
  kFloat,  // f32/f16/bf16 of exactly `shape`
  kFp8,    // F8_E4M3 of exactly `shape`
  kScale,  // floating, `shape` up to dimensions of size 1 ([] and [1], [N] and [N, 1] alike)
  kAny,    // any dtype and shape (the loader checks)
  kI32,    // int32 of exactly `shape` (packed 4-bit words, g_idx)
  kI64,    // int64 of exactly `shape`
};
struct WeightSource {
  // The checkpoint record of a tensor checked against `shape` and `kind`; errors name it.
  std::function<absl::StatusOr<const TensorRecord*>(const std::string& name, const std::vector<int64_t>& shape,
                                                    TensorKind kind)>
      lookup;
  std::function<bool(const std::string& name)> exists;
  // When set, fills each planned tensor (named by its first source tensor; `fan_in` is the full
  // input width of a matrix) instead of copying the records' data.
  std::function<absl::Status(Tensor dst, const std::string& name, int64_t fan_in)> fill;
};
absl::StatusOr<std::unique_ptr<ModelWeights>> BuildWeights(const ModelConfig& config, const ShardSpec& shard,
                                                           Backend& backend, const WeightSource& source,
                                                           const LoadOptions& options);
}  // namespace internal

}  // namespace llm
