// Typed weights of one pipeline stage of one tensor-parallel rank, in the backend's memory.
// The loader reads each rank's slices straight out of the memory-mapped checkpoint:
//   column-parallel (output rows split):  fused QKV, fused gate/up, vocab rows of embedding/lm_head
//   row-parallel (input columns split):   o_proj, down_proj (their bias added by TP rank 0 only)
// KV heads fewer than TP ranks are replicated: rank r uses KV head r / (tp / num_kv_heads).
#pragma once

#include <functional>
#include <memory>
#include <string>
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

struct LayerWeights {
  Tensor input_norm;            // [hidden]
  LinearWeight qkv;             // [(heads + 2 kv_heads) * head_dim, hidden]
  Tensor q_norm;                // [head_dim] (Qwen3) or empty
  Tensor k_norm;                // [head_dim] (Qwen3) or empty
  LinearWeight o_proj;          // [hidden, heads * head_dim]
  Tensor post_attention_norm;   // [hidden]
  LinearWeight gate_up;         // [2 * ffn, hidden]: gate rows, then up rows
  LinearWeight down;            // [hidden, ffn]
};

struct ModelWeights {
  Buffer memory;                // owns everything below
  Tensor embedding;             // [vocab_local, hidden] (first stage, or last stage when tied)
  std::vector<LayerWeights> layers;  // this stage's layers, in order
  Tensor final_norm;            // [hidden] (last stage)
  LinearWeight lm_head;         // [vocab_local, hidden] (last stage)
  size_t bytes = 0;             // weight bytes held by this rank
};

// Reads, slices, converts and uploads this shard's weights. Every tensor is checked for presence,
// shape and dtype; errors name the tensor and its file.
absl::StatusOr<std::unique_ptr<ModelWeights>> LoadWeights(const ModelConfig& config, const Checkpoint& checkpoint,
                                                          const ShardSpec& shard, Backend& backend);

namespace internal {
// The loader with its two inputs made explicit, so that LoadWeights and CreateDummyWeights
// (dummy_weights.h) share one shape/sharding plan. `lookup` returns the checkpoint record of a
// tensor name with the expected full shape; `fill`, when set, fills each planned tensor (named by
// its first source tensor) instead of copying the records' slices.
using TensorLookup =
    std::function<absl::StatusOr<const TensorRecord*>(const std::string& name, const std::vector<int64_t>& shape)>;
using TensorFill = std::function<absl::Status(Tensor dst, const std::string& name)>;
absl::StatusOr<std::unique_ptr<ModelWeights>> BuildWeights(const ModelConfig& config, const ShardSpec& shard,
                                                           Backend& backend, const TensorLookup& lookup,
                                                           const TensorFill& fill);
}  // namespace internal

}  // namespace llm
