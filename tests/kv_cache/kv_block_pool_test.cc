// KvBlockPool: reference counts, the content index of published blocks, and least-recently-used
// eviction of cached blocks nobody holds; BlockHash chains. Scheduler and engine tests check
// what the prefix cache does to outputs; these check the pool's own bookkeeping.
#include "engine/kv_cache/kv_block_pool.h"

#include <vector>

#include "gtest/gtest.h"

namespace llm {
namespace {

TEST(KvBlockPoolTest, AllocateAllOrNothingAndRelease) {
  KvBlockPool pool(4);
  std::vector<int32_t> a;
  ASSERT_TRUE(pool.Allocate(3, a));
  EXPECT_EQ(a, (std::vector<int32_t>{0, 1, 2}));
  EXPECT_EQ(pool.num_free(), 1);
  std::vector<int32_t> b;
  EXPECT_FALSE(pool.Allocate(2, b));
  EXPECT_TRUE(b.empty());
  EXPECT_EQ(pool.num_free(), 1);
  pool.Release(a);
  EXPECT_EQ(pool.num_free(), 4);
  EXPECT_EQ(pool.num_used(), 0);
}

TEST(KvBlockPoolTest, SharedBlocksAreFreedByTheirLastHolder) {
  KvBlockPool pool(2);
  std::vector<int32_t> a;
  ASSERT_TRUE(pool.Allocate(1, a));
  ASSERT_TRUE(pool.Publish(a[0], 42));
  pool.Acquire(a[0]);  // a second sequence takes it by content
  EXPECT_EQ(pool.ref_count(a[0]), 2);
  pool.Release(a);
  EXPECT_EQ(pool.ref_count(a[0]), 1);
  EXPECT_EQ(pool.num_used(), 1);
  pool.Release(a);
  EXPECT_EQ(pool.ref_count(a[0]), 0);
  EXPECT_EQ(pool.num_used(), 0);
  EXPECT_EQ(pool.Find(42), a[0]) << "nobody holds it, but it stays cached";
}

TEST(KvBlockPoolTest, CachedBlocksCountAsFreeAndAreTakenBackByContent) {
  KvBlockPool pool(3);
  std::vector<int32_t> a;
  ASSERT_TRUE(pool.Allocate(1, a));
  ASSERT_TRUE(pool.Publish(a[0], 7));
  pool.Release(a);
  EXPECT_EQ(pool.num_free(), 3);
  EXPECT_EQ(pool.stats().cached_blocks, 1);
  pool.Acquire(pool.Find(7));
  EXPECT_EQ(pool.num_free(), 2);
  EXPECT_EQ(pool.ref_count(a[0]), 1);
}

TEST(KvBlockPoolTest, NeverUsedBlocksGoFirstThenTheLeastRecentlyUsedCachedOne) {
  KvBlockPool pool(3);
  std::vector<int32_t> a;
  ASSERT_TRUE(pool.Allocate(3, a));
  ASSERT_TRUE(pool.Publish(a[0], 100));
  ASSERT_TRUE(pool.Publish(a[1], 101));
  // Block 2 unpublished: back among the never-used ones. Then 1, then 0 become cached: 1 is the
  // older one nobody holds.
  pool.Release({a[2]});
  pool.Release({a[1]});
  pool.Release({a[0]});
  std::vector<int32_t> b;
  ASSERT_TRUE(pool.Allocate(1, b));
  EXPECT_EQ(b[0], a[2]);
  EXPECT_EQ(pool.stats().evictions, 0u);
  ASSERT_TRUE(pool.Allocate(1, b));
  EXPECT_EQ(b[1], a[1]) << "the least recently released cached block";
  EXPECT_EQ(pool.Find(101), -1);
  EXPECT_EQ(pool.Find(100), a[0]);
  EXPECT_EQ(pool.stats().evictions, 1u);
  // Taking the remaining cached block by content moves it out of the eviction order.
  pool.Acquire(pool.Find(100));
  EXPECT_EQ(pool.num_free(), 0);
  std::vector<int32_t> c;
  EXPECT_FALSE(pool.Allocate(1, c));
}

TEST(KvBlockPoolTest, OneBlockPerContent) {
  KvBlockPool pool(2);
  std::vector<int32_t> a;
  ASSERT_TRUE(pool.Allocate(2, a));
  EXPECT_TRUE(pool.Publish(a[0], 9));
  EXPECT_TRUE(pool.Publish(a[0], 9)) << "again, the same block: a no-op";
  EXPECT_FALSE(pool.Publish(a[1], 9)) << "the same content computed twice: the second stays private";
  pool.Release(a);
  EXPECT_EQ(pool.stats().cached_blocks, 1);
  EXPECT_EQ(pool.Find(9), a[0]);
}

TEST(KvBlockPoolTest, ForgetCachedUnpublishesEverything) {
  KvBlockPool pool(2);
  std::vector<int32_t> a;
  ASSERT_TRUE(pool.Allocate(2, a));
  ASSERT_TRUE(pool.Publish(a[0], 5));
  ASSERT_TRUE(pool.Publish(a[1], 6));
  pool.Release({a[0]});
  pool.ForgetCached();
  EXPECT_EQ(pool.Find(5), -1);
  EXPECT_EQ(pool.Find(6), -1);
  EXPECT_EQ(pool.num_free(), 1);
  pool.Release({a[1]});
  EXPECT_EQ(pool.num_free(), 2);
  EXPECT_EQ(pool.stats().cached_blocks, 0);
}

TEST(BlockHashTest, ChainsAndSaltsSeparateEqualTokens) {
  const std::vector<int32_t> t = {1, 2, 3, 4};
  const uint64_t root = SaltHash("");
  const uint64_t h = BlockHash(root, t);
  EXPECT_EQ(h, BlockHash(root, t));
  EXPECT_NE(h, BlockHash(BlockHash(root, t), t)) << "the same tokens after another block";
  EXPECT_NE(h, BlockHash(SaltHash("tenant-a"), t)) << "another salt";
  EXPECT_NE(SaltHash("tenant-a"), SaltHash("tenant-b"));
  EXPECT_NE(h, BlockHash(root, std::vector<int32_t>{1, 2, 4, 3}));
  EXPECT_NE(h, 0u);
}

}  // namespace
}  // namespace llm
