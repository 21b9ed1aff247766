#include "engine/kv_cache/kv_cache.h"

#include "absl/strings/str_cat.h"

namespace llm {

absl::StatusOr<std::unique_ptr<KvCache>> KvCache::Create(Backend& backend, const KvCacheShape& shape) {
  if (shape.num_layers <= 0 || shape.num_blocks <= 0 || shape.block_size <= 0 || shape.num_kv_heads <= 0 ||
      shape.head_dim <= 0)
    return absl::InvalidArgumentError(absl::StrCat("invalid KV cache shape: ", shape.num_layers, " layers, ",
                                                   shape.num_blocks, " blocks of ", shape.block_size, " tokens"));
  auto cache = std::unique_ptr<KvCache>(new KvCache());
  cache->shape_ = shape;
  ASSIGN_OR_RETURN(cache->memory_, backend.Allocate(shape.BytesPerBlock() * shape.num_blocks));
  const Shape per_layer{shape.num_blocks, shape.num_kv_heads, shape.block_size, shape.head_dim};
  const size_t half = static_cast<size_t>(per_layer.numel()) * DTypeSize(shape.dtype);
  for (int64_t l = 0; l < shape.num_layers; ++l) {
    cache->layers_.push_back({cache->memory_.View(shape.dtype, per_layer, (2 * l) * half),
                              cache->memory_.View(shape.dtype, per_layer, (2 * l + 1) * half)});
  }
  return cache;
}

}  // namespace llm
