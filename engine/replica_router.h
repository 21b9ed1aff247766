// Which data-parallel replica a new request goes to (llm serve --replicas N). Each replica has a
// KV cache of its own, so a request whose prompt begins like one sent to a replica before is
// sent there again, where its prefix is likely still cached (automatic prefix caching), unless
// that replica is busier than the least loaded by more than a slack; otherwise the least loaded
// replica takes it. The router remembers, per replica, the content hashes of the full prompt
// blocks it routed there (the chain the KV cache publishes blocks under: BlockHash from the
// request's cache salt), bounded and least recently used first out, as SGLang's cache-aware
// router keeps an approximate tree of what each worker holds. It cannot see evictions; a
// replica that lost its workers (and so its KV cache) is forgotten.
#ifndef LLM_ENGINE_REPLICA_ROUTER_H_
#define LLM_ENGINE_REPLICA_ROUTER_H_

#include <cstdint>
#include <list>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "absl/types/span.h"

namespace llm {

class ReplicaRouter {
 public:
  // What the router needs to know of each replica when a request arrives.
  struct Replica {
    bool healthy = true;    // false: it will never serve again
    bool available = true;  // false: its workers are being replaced (requests wait there)
    int64_t load = 0;       // requests it holds
  };

  // `prefix_aware` false (one replica, or prefix caching off): least loaded only.
  // `max_blocks_per_replica` bounds the memory of what was routed where.
  ReplicaRouter(int32_t block_size, bool prefix_aware, size_t max_blocks_per_replica = size_t{1} << 16);

  // The replica for a prompt: among available replicas (or, when none is, those being restarted),
  // the one holding the longest prefix of the prompt if its load is within the slack of the least
  // loaded, else the least loaded (the lowest index on ties). -1 when no replica is healthy.
  // Records the prompt's blocks as held by the chosen replica.
  int Pick(absl::Span<const Replica> replicas, absl::Span<const int32_t> prompt, uint64_t salt_hash);

  // How many more requests than the least loaded replica a replica may hold and still be chosen
  // for its cached prefix: a quarter more, at least 4.
  static int64_t Slack(int64_t least_load) { return least_load / 4 > 4 ? least_load / 4 : 4; }

 private:
  struct Held {
    std::list<uint64_t> lru;  // most recently routed first
    std::unordered_map<uint64_t, std::list<uint64_t>::iterator> index;
    bool was_available = true;
  };
  // Leading blocks of `hashes` that `held` has.
  static size_t Matched(const Held& held, const std::vector<uint64_t>& hashes);
  void Remember(Held& held, const std::vector<uint64_t>& hashes);

  const int32_t block_size_;
  const bool prefix_aware_;
  const size_t max_blocks_;
  std::mutex mu_;
  std::vector<Held> held_;
  std::vector<uint64_t> hashes_;  // scratch, under mu_
};

}  // namespace llm

#endif  // LLM_ENGINE_REPLICA_ROUTER_H_
