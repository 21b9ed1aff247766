#include "engine/kv_cache/kv_block_pool.h"

#include "kernels/core/status.h"

namespace llm {

KvBlockPool::KvBlockPool(int32_t num_blocks) : num_blocks_(num_blocks), in_use_(num_blocks, false) {
  free_.reserve(num_blocks);
  for (int32_t b = num_blocks - 1; b >= 0; --b) free_.push_back(b);  // hand out block 0 first
}

bool KvBlockPool::Allocate(int32_t count, std::vector<int32_t>& out) {
  if (count < 0 || count > num_free()) return false;
  for (int32_t i = 0; i < count; ++i) {
    const int32_t b = free_.back();
    free_.pop_back();
    in_use_[b] = true;
    out.push_back(b);
  }
  return true;
}

void KvBlockPool::Free(absl::Span<const int32_t> blocks) {
  for (int32_t b : blocks) {
    LLM_CHECK(b >= 0 && b < num_blocks_ && in_use_[b]);  // a double free is a scheduler bug
    in_use_[b] = false;
    free_.push_back(b);
  }
}

}  // namespace llm
