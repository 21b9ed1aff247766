// ReplicaRouter: requests sharing a prompt prefix go to the replica that had it (where the KV cache
// may still hold it) unless it is busier than the least loaded by more than the slack; otherwise
// the least loaded; replicas being restarted only when none runs; none when none will serve.
#include "engine/replica_router.h"

#include <numeric>
#include <vector>

#include "engine/kv_cache/kv_block_pool.h"
#include "gtest/gtest.h"

namespace llm {
namespace {

constexpr int32_t kBlock = 16;

std::vector<int32_t> Prompt(int prefix_id, int prefix_blocks, int tail) {
  std::vector<int32_t> p(prefix_blocks * kBlock + tail);
  for (size_t i = 0; i < p.size(); ++i)
    p[i] = static_cast<int32_t>(i < static_cast<size_t>(prefix_blocks * kBlock) ? 1000 * prefix_id + i : 7 * i + 3);
  return p;
}

using Replicas = std::vector<ReplicaRouter::Replica>;

TEST(ReplicaRouterTest, ASharedPrefixGoesWhereItWentBefore) {
  ReplicaRouter router(kBlock, true);
  Replicas r(3);
  // Prefix 1 lands on the least loaded, replica 1; later requests with it follow while replica 1
  // stays within the slack, although replica 0 and 2 are less loaded.
  r[0].load = 2, r[1].load = 0, r[2].load = 3;
  EXPECT_EQ(router.Pick(r, Prompt(1, 4, 5), 0), 1);
  r[1].load = 5;
  EXPECT_EQ(router.Pick(r, Prompt(1, 4, 9), 0), 1);
  EXPECT_EQ(router.Pick(r, Prompt(1, 2, 0), 0), 1);  // a shorter prompt of the same prefix
  // Another prefix goes to the least loaded.
  EXPECT_EQ(router.Pick(r, Prompt(2, 4, 5), 0), 0);
  // The longest match wins: replica 0 now holds 4 blocks of prefix 2, replica 1 of prefix 1.
  r[0].load = 3, r[1].load = 3;
  EXPECT_EQ(router.Pick(r, Prompt(2, 6, 1), 0), 0);
  EXPECT_EQ(router.Pick(r, Prompt(1, 6, 1), 0), 1);
}

TEST(ReplicaRouterTest, ABusyReplicaLosesItsPrefixToTheLeastLoaded) {
  ReplicaRouter router(kBlock, true);
  Replicas r(2);
  EXPECT_EQ(router.Pick(r, Prompt(1, 4, 0), 0), 0);
  r[0].load = ReplicaRouter::Slack(0);  // at the slack: still chosen for its prefix
  EXPECT_EQ(router.Pick(r, Prompt(1, 4, 0), 0), 0);
  r[0].load = ReplicaRouter::Slack(0) + 1;  // past it
  EXPECT_EQ(router.Pick(r, Prompt(1, 4, 0), 0), 1);
  // Now both hold the prefix: the less loaded of them.
  r[0].load = 1, r[1].load = 2;
  EXPECT_EQ(router.Pick(r, Prompt(1, 4, 0), 0), 0);
  EXPECT_EQ(ReplicaRouter::Slack(100), 25);
}

TEST(ReplicaRouterTest, CacheSaltsAndPartialBlocksDoNotMatch) {
  ReplicaRouter router(kBlock, true);
  Replicas r(2);
  r[1].load = 1;
  EXPECT_EQ(router.Pick(r, Prompt(1, 4, 0), SaltHash("tenant-a")), 0);
  r[0].load = 2;
  // The same tokens under another salt share nothing: the least loaded.
  EXPECT_EQ(router.Pick(r, Prompt(1, 4, 0), SaltHash("tenant-b")), 1);
  // Fewer tokens than a block: nothing to reuse, the least loaded.
  r[0].load = 0;
  ReplicaRouter fresh(kBlock, true);
  EXPECT_EQ(fresh.Pick(r, Prompt(3, 0, kBlock - 1), 0), 0);
  r[0].load = 2;
  EXPECT_EQ(fresh.Pick(r, Prompt(3, 0, kBlock - 1), 0), 1);
}

TEST(ReplicaRouterTest, RestartingReplicasForgetTheirPrefixAndServeOnlyWhenNoneRuns) {
  ReplicaRouter router(kBlock, true);
  Replicas r(2);
  EXPECT_EQ(router.Pick(r, Prompt(1, 4, 0), 0), 0);
  r[0].available = false;  // its workers are being replaced
  EXPECT_EQ(router.Pick(r, Prompt(1, 4, 0), 0), 1);
  r[0].available = true;
  r[1].load = 1;
  // Replica 1 took the prefix while 0 restarted; 0's old blocks are gone with its KV cache.
  EXPECT_EQ(router.Pick(r, Prompt(1, 4, 0), 0), 1);
  r[1].load = 0;
  EXPECT_EQ(router.Pick(r, Prompt(9, 4, 0), 0), 0);
  // None runs steps: requests wait at the least loaded of those restarting.
  r[0].available = r[1].available = false;
  r[0].load = 3;
  EXPECT_EQ(router.Pick(r, Prompt(5, 1, 0), 0), 1);
  // None will serve again.
  r[0].healthy = r[1].healthy = false;
  EXPECT_EQ(router.Pick(r, Prompt(5, 1, 0), 0), -1);
}

TEST(ReplicaRouterTest, WithoutPrefixAwarenessTheLeastLoaded) {
  ReplicaRouter router(kBlock, false);
  Replicas r(3);
  r[0].load = 1, r[1].load = 1, r[2].load = 0;
  EXPECT_EQ(router.Pick(r, Prompt(1, 4, 0), 0), 2);
  r[2].load = 2;
  EXPECT_EQ(router.Pick(r, Prompt(1, 4, 0), 0), 0);  // lowest index on ties
}

TEST(ReplicaRouterTest, MemoryIsBoundedLeastRecentlyRoutedFirstOut) {
  ReplicaRouter router(kBlock, true, /*max_blocks_per_replica=*/8);
  Replicas r(2);
  EXPECT_EQ(router.Pick(r, Prompt(1, 4, 0), 0), 0);  // 4 blocks held
  r[0].load = 1;
  EXPECT_EQ(router.Pick(r, Prompt(2, 4, 0), 0), 1);
  r[1].load = 2;
  EXPECT_EQ(router.Pick(r, Prompt(3, 8, 0), 0), 0);  // 8 more on replica 0: prefix 1 forgotten
  r[0].load = 2, r[1].load = 1;
  EXPECT_EQ(router.Pick(r, Prompt(1, 4, 0), 0), 1);  // no match left: the least loaded
}

}  // namespace
}  // namespace llm
