// KvBlockPool: which KV blocks are free. The scheduler is the only owner: a sequence's blocks are
// taken here when it is scheduled and returned when it finishes, is cancelled or is preempted.
// KvBlockTable: one sequence's blocks, in token order.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/types/span.h"

namespace llm {

class KvBlockPool {
 public:
  explicit KvBlockPool(int32_t num_blocks);

  int32_t num_blocks() const { return num_blocks_; }
  int32_t num_free() const { return static_cast<int32_t>(free_.size()); }
  int32_t num_used() const { return num_blocks_ - num_free(); }

  // Appends `count` blocks to `out`, or nothing at all when fewer are free.
  bool Allocate(int32_t count, std::vector<int32_t>& out);
  void Free(absl::Span<const int32_t> blocks);

 private:
  int32_t num_blocks_;
  std::vector<int32_t> free_;   // a stack: recently freed blocks are reused first
  std::vector<bool> in_use_;    // catches double frees
};

class KvBlockTable {
 public:
  static int32_t BlocksFor(int64_t tokens, int32_t block_size) {
    return static_cast<int32_t>((tokens + block_size - 1) / block_size);
  }
  const std::vector<int32_t>& blocks() const { return blocks_; }
  std::vector<int32_t>& mutable_blocks() { return blocks_; }
  int64_t capacity(int32_t block_size) const { return static_cast<int64_t>(blocks_.size()) * block_size; }
  // Grows the table to hold `tokens`; false (and unchanged) when the pool is short.
  bool Reserve(int64_t tokens, int32_t block_size, KvBlockPool& pool) {
    const int32_t need = BlocksFor(tokens, block_size) - static_cast<int32_t>(blocks_.size());
    return need <= 0 || pool.Allocate(need, blocks_);
  }
  void Release(KvBlockPool& pool) {
    pool.Free(blocks_);
    blocks_.clear();
  }
  // The cache slot of token `position`.
  int32_t Slot(int64_t position, int32_t block_size) const {
    return blocks_[position / block_size] * block_size + static_cast<int32_t>(position % block_size);
  }

 private:
  std::vector<int32_t> blocks_;
};

}  // namespace llm
