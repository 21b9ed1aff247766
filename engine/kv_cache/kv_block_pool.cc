#include "engine/kv_cache/kv_block_pool.h"

#include <string_view>

#include "kernels/core/status.h"

namespace llm {
namespace {

// A 64-bit mix with full avalanche (the splitmix64 finalizer).
uint64_t Mix(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace

uint64_t BlockHash(uint64_t parent, absl::Span<const int32_t> tokens) {
  uint64_t h = Mix(parent ^ 0x9e3779b97f4a7c15ull);
  for (int32_t t : tokens) h = Mix(h ^ (static_cast<uint64_t>(static_cast<uint32_t>(t)) + 0x632be59bd9b4e019ull));
  h = Mix(h ^ tokens.size());
  return h == 0 ? 1 : h;
}

uint64_t SaltHash(std::string_view salt) {
  uint64_t h = 0x2545f4914f6cdd1dull;
  for (unsigned char c : salt) h = Mix(h ^ c);
  return Mix(h ^ salt.size());
}

KvBlockPool::KvBlockPool(int32_t num_blocks)
    : num_blocks_(num_blocks), lru_pos_(num_blocks), refs_(num_blocks, 0), hash_(num_blocks, kUnpublished) {
  free_.reserve(num_blocks);
  for (int32_t b = num_blocks - 1; b >= 0; --b) free_.push_back(b);  // hand out block 0 first
}

bool KvBlockPool::Allocate(int32_t count, std::vector<int32_t>& out) {
  if (count < 0 || count > num_free()) return false;
  for (int32_t i = 0; i < count; ++i) {
    int32_t b;
    if (!free_.empty()) {
      b = free_.back();
      free_.pop_back();
    } else {  // the least recently used cached block: its content goes
      b = evictable_.front();
      evictable_.pop_front();
      Unpublish(b);
      ++evictions_;
    }
    refs_[b] = 1;
    out.push_back(b);
  }
  return true;
}

void KvBlockPool::Release(absl::Span<const int32_t> blocks) {
  for (int32_t b : blocks) {
    LLM_CHECK(b >= 0 && b < num_blocks_ && refs_[b] > 0);  // a double free is a scheduler bug
    if (--refs_[b] > 0) continue;
    if (hash_[b] == kUnpublished) {
      free_.push_back(b);
    } else {
      evictable_.push_back(b);
      lru_pos_[b] = std::prev(evictable_.end());
    }
  }
}

int32_t KvBlockPool::Find(uint64_t hash) const {
  auto it = index_.find(hash);
  return it == index_.end() ? -1 : it->second;
}

void KvBlockPool::Acquire(int32_t block) {
  LLM_CHECK(block >= 0 && block < num_blocks_);
  if (refs_[block] == 0) {
    LLM_CHECK(hash_[block] != kUnpublished);  // only cached blocks are taken by content
    evictable_.erase(lru_pos_[block]);
  }
  ++refs_[block];
}

bool KvBlockPool::Publish(int32_t block, uint64_t hash) {
  LLM_CHECK(block >= 0 && block < num_blocks_ && refs_[block] > 0 && hash != kUnpublished);
  if (hash_[block] == hash) return true;
  if (hash_[block] != kUnpublished || index_.count(hash)) return false;
  hash_[block] = hash;
  index_.emplace(hash, block);
  return true;
}

void KvBlockPool::ForgetCached() {
  for (int32_t b : evictable_) free_.push_back(b);
  evictable_.clear();
  for (int32_t b = 0; b < num_blocks_; ++b) Unpublish(b);
}

void KvBlockPool::Unpublish(int32_t block) {
  if (hash_[block] == kUnpublished) return;
  index_.erase(hash_[block]);
  hash_[block] = kUnpublished;
}

}  // namespace llm
