// KvCache: the paged K/V memory of one pipeline stage (its layers only), carved from one
// start-up allocation. It holds bytes only; which sequence owns which block is the business of
// KvBlockPool and each sequence's KvBlockTable, kept by the scheduler.
#pragma once

#include <memory>
#include <optional>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/backend/backend.h"

namespace llm {

struct KvCacheShape {
  int64_t num_layers = 0;  // this stage's layers
  int64_t num_blocks = 0;
  int64_t block_size = 16;  // token slots per block
  int64_t num_kv_heads = 0;  // per rank
  int64_t head_dim = 0;
  DType dtype = DType::kF32;  // storage: the activation dtype, or kF8E4M3 (half the bytes of bf16)

  size_t BytesPerBlock() const {
    return 2 * static_cast<size_t>(num_layers * num_kv_heads * block_size * head_dim) * DTypeSize(dtype);
  }
};

// Per-tensor scales of one layer's FP8 cache (KvCacheLayer::k_scale / v_scale).
struct KvCacheScales {
  float k = 1.0f;
  float v = 1.0f;
};

// The cache's element type for --kv-cache-dtype: `requested` when set (the backend must take it),
// else "auto": FP8 when the checkpoint carries k/v scales for this stage's layers and the backend
// computes in 16 bits and takes an FP8 cache; the activation dtype otherwise (so the float32 CPU
// oracle keeps a float32 cache unless FP8 is asked for).
absl::StatusOr<DType> ChooseKvCacheDType(std::optional<DType> requested, bool checkpoint_has_scales,
                                         const Backend& backend);
// "auto" -> nullopt; "bf16", "fp16", "fp32", "fp8" (also "fp8_e4m3").
absl::StatusOr<std::optional<DType>> ParseKvCacheDType(std::string_view name);

class KvCache {
 public:
  // `scales`: one per layer for an FP8 cache (empty: 1.0 everywhere); ignored otherwise.
  static absl::StatusOr<std::unique_ptr<KvCache>> Create(Backend& backend, const KvCacheShape& shape,
                                                         absl::Span<const KvCacheScales> scales = {});

  const KvCacheShape& shape() const { return shape_; }
  absl::Span<const KvCacheLayer> layers() const { return layers_; }
  size_t bytes() const { return memory_.bytes(); }

 private:
  KvCacheShape shape_;
  Buffer memory_;
  std::vector<KvCacheLayer> layers_;
};

}  // namespace llm
