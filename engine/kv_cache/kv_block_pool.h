// KvBlockPool: which KV blocks are free, which are shared, and which hold a known prefix.
//
// A block is held by the sequences that reference it (a reference count). A full block whose
// tokens are known can be published under its content hash (BlockHash: the hash of its tokens
// chained with the hash of the block before it, and the request's cache salt), so that a later
// request with the same prefix takes a reference to it instead of computing it again (automatic
// prefix caching). A published block that no sequence holds stays cached, least recently used
// first to go: it is given out again only when no never-used (or unpublished) block is left,
// and then leaves the index. Free blocks are therefore the never-used ones plus the cached ones
// nobody holds, and num_free() counts both. Only the scheduler owns a pool.
//
// KvBlockTable: one sequence's blocks, in token order, with the hashes of the full blocks it has
// published or matched so far.
#pragma once

#include <cstdint>
#include <list>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "absl/types/span.h"

namespace llm {

struct KvBlockPoolStats {
  int32_t cached_blocks = 0;      // published blocks in the index (held or not)
  uint64_t evictions = 0;         // cached blocks given out for other content
};

class KvBlockPool {
 public:
  explicit KvBlockPool(int32_t num_blocks);

  int32_t num_blocks() const { return num_blocks_; }
  // Blocks that Allocate can give: never-used ones and cached ones that nobody holds.
  int32_t num_free() const { return static_cast<int32_t>(free_.size() + evictable_.size()); }
  int32_t num_used() const { return num_blocks_ - num_free(); }
  KvBlockPoolStats stats() const { return {static_cast<int32_t>(index_.size()), evictions_}; }

  // Appends `count` blocks (each with one reference) to `out`, or nothing at all when fewer are
  // free. Never-used blocks go first; then the least recently used cached ones, unpublished.
  bool Allocate(int32_t count, std::vector<int32_t>& out);
  // Drops one reference of each block; a block nobody holds becomes free (cached if published).
  void Release(absl::Span<const int32_t> blocks);

  // The published block with this content, or -1.
  int32_t Find(uint64_t hash) const;
  // One more reference to a block (a published block found by Find).
  void Acquire(int32_t block);
  // Publishes `block` (held) under `hash`; false (nothing changes) when the hash is already
  // published, by another block with the same content.
  bool Publish(int32_t block, uint64_t hash);
  int32_t ref_count(int32_t block) const { return refs_[block]; }
  // Unpublishes every block (cached ones nobody holds become never-used ones).
  void ForgetCached();

 private:
  static constexpr uint64_t kUnpublished = 0;
  void Unpublish(int32_t block);

  int32_t num_blocks_;
  std::vector<int32_t> free_;      // never used or unpublished, nobody holds them: a stack
  std::list<int32_t> evictable_;   // published, nobody holds them: least recently used first
  std::vector<std::list<int32_t>::iterator> lru_pos_;  // a block's place in evictable_
  std::vector<int32_t> refs_;
  std::vector<uint64_t> hash_;     // kUnpublished, or the hash the block is published under
  std::unordered_map<uint64_t, int32_t> index_;
  uint64_t evictions_ = 0;
};

// The content hash of a full block: its tokens chained with the hash of the block before it (the
// first block's "parent" is the request's cache salt, so that requests of different salts never
// share a block). Never kUnpublished (0).
uint64_t BlockHash(uint64_t parent, absl::Span<const int32_t> tokens);
// The chain's start for a cache salt (an empty salt: the default chain).
uint64_t SaltHash(std::string_view salt);

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
    pool.Release(blocks_);
    blocks_.clear();
    hashes_.clear();
  }
  // The cache slot of token `position`.
  int32_t Slot(int64_t position, int32_t block_size) const {
    return blocks_[position / block_size] * block_size + static_cast<int32_t>(position % block_size);
  }
  // Hashes of the first full blocks (published, or matched from the cache), in order.
  const std::vector<uint64_t>& hashes() const { return hashes_; }
  std::vector<uint64_t>& mutable_hashes() { return hashes_; }

 private:
  std::vector<int32_t> blocks_;
  std::vector<uint64_t> hashes_;
};

}  // namespace llm
