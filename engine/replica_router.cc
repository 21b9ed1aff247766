#include "engine/replica_router.h"

#include <algorithm>

#include "engine/kv_cache/kv_block_pool.h"

namespace llm {

ReplicaRouter::ReplicaRouter(int32_t block_size, bool prefix_aware, size_t max_blocks_per_replica)
    : block_size_(std::max(block_size, 1)), prefix_aware_(prefix_aware), max_blocks_(max_blocks_per_replica) {}

size_t ReplicaRouter::Matched(const Held& held, const std::vector<uint64_t>& hashes) {
  size_t n = 0;
  while (n < hashes.size() && held.index.count(hashes[n]) != 0) ++n;
  return n;
}

void ReplicaRouter::Remember(Held& held, const std::vector<uint64_t>& hashes) {
  for (uint64_t h : hashes) {
    auto it = held.index.find(h);
    if (it != held.index.end()) {
      held.lru.splice(held.lru.begin(), held.lru, it->second);
      continue;
    }
    held.lru.push_front(h);
    held.index.emplace(h, held.lru.begin());
    if (held.index.size() > max_blocks_) {
      held.index.erase(held.lru.back());
      held.lru.pop_back();
    }
  }
}

int ReplicaRouter::Pick(absl::Span<const Replica> replicas, absl::Span<const int32_t> prompt, uint64_t salt_hash) {
  std::lock_guard<std::mutex> lock(mu_);
  if (held_.size() < replicas.size()) held_.resize(replicas.size());
  // A replica that lost its workers lost its KV cache with them.
  for (size_t i = 0; i < replicas.size(); ++i) {
    if (!replicas[i].available && held_[i].was_available) {
      held_[i].lru.clear();
      held_[i].index.clear();
    }
    held_[i].was_available = replicas[i].available;
  }
  bool any_available = false;
  for (const Replica& r : replicas) any_available |= r.healthy && r.available;
  auto eligible = [&](size_t i) { return replicas[i].healthy && (replicas[i].available || !any_available); };

  int least = -1;
  for (size_t i = 0; i < replicas.size(); ++i)
    if (eligible(i) && (least < 0 || replicas[i].load < replicas[least].load)) least = static_cast<int>(i);
  if (least < 0) return -1;

  int chosen = least;
  const bool route_by_prefix = prefix_aware_ && replicas.size() > 1;
  if (route_by_prefix) {
    // The blocks the KV cache could reuse: full blocks of the prompt, as the scheduler publishes them.
    hashes_.clear();
    uint64_t parent = salt_hash;
    for (size_t start = 0; start + block_size_ <= prompt.size(); start += block_size_) {
      parent = BlockHash(parent, prompt.subspan(start, block_size_));
      hashes_.push_back(parent);
    }
    size_t best_match = 0;
    const int64_t limit = replicas[least].load + Slack(replicas[least].load);
    for (size_t i = 0; i < replicas.size(); ++i) {
      if (!eligible(i) || replicas[i].load > limit) continue;
      const size_t matched = Matched(held_[i], hashes_);
      if (matched > best_match || (matched == best_match && matched > 0 && replicas[i].load < replicas[chosen].load)) {
        best_match = matched;
        chosen = static_cast<int>(i);
      }
    }
    if (best_match == 0) chosen = least;
    Remember(held_[chosen], hashes_);
  }
  return chosen;
}

}  // namespace llm
