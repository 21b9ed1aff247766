// KvCache: the paged K/V memory of one pipeline stage (its layers only), carved from one
// start-up allocation. It holds bytes only; which sequence owns which block is the business of
// KvBlockPool and each sequence's KvBlockTable, kept by the scheduler.
#pragma once

#include <memory>
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
  DType dtype = DType::kF32;

  size_t BytesPerBlock() const {
    return 2 * static_cast<size_t>(num_layers * num_kv_heads * block_size * head_dim) * DTypeSize(dtype);
  }
};

class KvCache {
 public:
  static absl::StatusOr<std::unique_ptr<KvCache>> Create(Backend& backend, const KvCacheShape& shape);

  const KvCacheShape& shape() const { return shape_; }
  absl::Span<const KvCacheLayer> layers() const { return layers_; }
  size_t bytes() const { return memory_.bytes(); }

 private:
  KvCacheShape shape_;
  Buffer memory_;
  std::vector<KvCacheLayer> layers_;
};

}  // namespace llm
