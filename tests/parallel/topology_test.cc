#include "parallel/topology.h"

#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace llm {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

Topology Make(int world, int rank, int local_rank, int local_size, int tp, int pp) {
  auto t = Topology::Create(world, rank, local_rank, local_size, tp, pp);
  EXPECT_TRUE(t.ok()) << t.status();
  return *t;
}

TEST(TopologyTest, SingleIsTrivial) {
  const Topology t = Topology::Single();
  EXPECT_EQ(t.world_size(), 1);
  EXPECT_EQ(t.tp_rank(), 0);
  EXPECT_EQ(t.pp_stage(), 0);
  EXPECT_EQ(t.device(), 0);
  EXPECT_TRUE(t.is_first_stage());
  EXPECT_TRUE(t.is_last_stage());
  EXPECT_FALSE(t.PrevStageRank().has_value());
  EXPECT_FALSE(t.NextStageRank().has_value());
  EXPECT_THAT(t.TpGroupRanks(), ElementsAre(0));
  EXPECT_THAT(t.PpGroupRanks(), ElementsAre(0));
  EXPECT_EQ(t, Make(1, 0, 0, 1, 1, 1));
}

TEST(TopologyTest, Tp2Pp2MapsConsecutiveRanksToOneTpGroup) {
  // rank = stage * tp + tp_rank; two nodes of two ranks each.
  struct Expected {
    int tp_rank, stage;
    std::vector<int> tp_group, pp_group;
  };
  const Expected expected[] = {
      {0, 0, {0, 1}, {0, 2}},
      {1, 0, {0, 1}, {1, 3}},
      {0, 1, {2, 3}, {0, 2}},
      {1, 1, {2, 3}, {1, 3}},
  };
  for (int rank = 0; rank < 4; ++rank) {
    SCOPED_TRACE(rank);
    const Topology t = Make(4, rank, rank % 2, 2, 2, 2);
    EXPECT_EQ(t.tp_rank(), expected[rank].tp_rank);
    EXPECT_EQ(t.pp_stage(), expected[rank].stage);
    EXPECT_EQ(t.TpGroupRanks(), expected[rank].tp_group);
    EXPECT_EQ(t.PpGroupRanks(), expected[rank].pp_group);
    EXPECT_EQ(t.device(), rank % 2);
    EXPECT_EQ(t.tp_group_color(), t.pp_stage());
    EXPECT_EQ(t.pp_group_color(), t.tp_rank());
    EXPECT_EQ(t.RankAt(t.pp_stage(), t.tp_rank()), rank);
    EXPECT_TRUE(t.tp_group_within_node());
  }
  const Topology r1 = Make(4, 1, 1, 2, 2, 2);
  EXPECT_TRUE(r1.is_first_stage());
  EXPECT_FALSE(r1.is_last_stage());
  EXPECT_FALSE(r1.PrevStageRank().has_value());
  EXPECT_EQ(r1.NextStageRank(), 3);
  const Topology r2 = Make(4, 2, 0, 2, 2, 2);
  EXPECT_TRUE(r2.is_last_stage());
  EXPECT_EQ(r2.PrevStageRank(), 0);
  EXPECT_FALSE(r2.NextStageRank().has_value());
}

TEST(TopologyTest, PurePipelineChainsStages) {
  const Topology t = Make(4, 2, 2, 4, 1, 4);
  EXPECT_EQ(t.pp_stage(), 2);
  EXPECT_EQ(t.tp_rank(), 0);
  EXPECT_EQ(t.PrevStageRank(), 1);
  EXPECT_EQ(t.NextStageRank(), 3);
  EXPECT_THAT(t.TpGroupRanks(), ElementsAre(2));
  EXPECT_THAT(t.PpGroupRanks(), ElementsAre(0, 1, 2, 3));
}

TEST(TopologyTest, PureTensorParallelIsOneStage) {
  const Topology t = Make(8, 5, 5, 8, 8, 1);
  EXPECT_EQ(t.tp_rank(), 5);
  EXPECT_TRUE(t.is_first_stage());
  EXPECT_TRUE(t.is_last_stage());
  EXPECT_THAT(t.TpGroupRanks(), ElementsAre(0, 1, 2, 3, 4, 5, 6, 7));
  EXPECT_THAT(t.PpGroupRanks(), ElementsAre(5));
}

TEST(TopologyTest, TpGroupAcrossNodesIsReported) {
  const Topology t = Make(4, 0, 0, 2, 4, 1);  // tp 4 over nodes of 2
  EXPECT_FALSE(t.tp_group_within_node());
}

TEST(TopologyTest, RejectsInvalidShapes) {
  struct Case {
    int world, rank, local_rank, local_size, tp, pp;
    const char* message;
  };
  const Case cases[] = {
      {4, 0, 0, 4, 2, 1, "world size 4 != tp 2 x pp 1"}, {4, 0, 0, 4, 0, 4, "must both be >= 1"},
      {4, 0, 0, 4, 4, -1, "must both be >= 1"},          {0, 0, 0, 1, 1, 1, "world size must be >= 1"},
      {4, 4, 0, 4, 2, 2, "rank 4 out of range"},         {4, -1, 0, 4, 2, 2, "rank -1 out of range"},
      {4, 0, 2, 2, 2, 2, "local rank 2 out of range"},   {4, 0, 0, 5, 2, 2, "local size 5 out of range"},
  };
  for (const Case& c : cases) {
    auto t = Topology::Create(c.world, c.rank, c.local_rank, c.local_size, c.tp, c.pp);
    ASSERT_FALSE(t.ok()) << c.message;
    EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(t.status().message()), HasSubstr(c.message));
  }
}

TEST(TopologyTest, ToStringNamesEveryCoordinate) {
  EXPECT_EQ(Make(4, 3, 1, 2, 2, 2).ToString(), "rank 3/4 (local 1/2, device 1): tp 1/2, pp stage 1/2");
}

// --- model divisibility ---

ModelDims Llama8B() { return {32, 8, 14336, 128256, 32}; }

TEST(ShardModelTest, DividesHeadsFfnAndPadsVocab) {
  auto s = ShardModel(Llama8B(), 4, 2);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->heads_per_rank, 8);
  EXPECT_EQ(s->kv_heads_per_rank, 2);
  EXPECT_EQ(s->kv_replication, 1);
  EXPECT_EQ(s->intermediate_per_rank, 3584);
  EXPECT_EQ(s->vocab_per_rank, 32064);
  EXPECT_EQ(s->padded_vocab_size, 128256);
}

TEST(ShardModelTest, PadsVocabNotDivisibleByTp) {
  ModelDims d{16, 16, 4096, 32001, 4};
  auto s = ShardModel(d, 4, 1);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->vocab_per_rank, 8001);  // ceil(32001 / 4)
  EXPECT_EQ(s->padded_vocab_size, 32004);
}

TEST(ShardModelTest, ReplicatesKvHeadsFewerThanTp) {
  ModelDims d{32, 2, 8192, 1000, 8};
  auto s = ShardModel(d, 8, 1);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->kv_heads_per_rank, 1);
  EXPECT_EQ(s->kv_replication, 4);
  // MQA: one KV head on every rank.
  d.num_kv_heads = 1;
  s = ShardModel(d, 8, 1);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->kv_replication, 8);
}

TEST(ShardModelTest, TpOneKeepsEverything) {
  auto s = ShardModel(Llama8B(), 1, 1);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->heads_per_rank, 32);
  EXPECT_EQ(s->kv_heads_per_rank, 8);
  EXPECT_EQ(s->vocab_per_rank, 128256);
}

TEST(ShardModelTest, RejectsIndivisibleModels) {
  struct Case {
    ModelDims dims;
    int tp, pp;
    const char* message;
  };
  const Case cases[] = {
      {{12, 12, 4096, 1000, 4}, 8, 1, "num_heads 12 is not divisible"},
      {{32, 8, 1000, 1000, 4}, 16, 1, "intermediate_size 1000 is not divisible"},
      {{24, 6, 4096, 1000, 4}, 4, 1, "num_kv_heads 6 is not divisible"},
      {{48, 3, 4096, 1000, 4}, 4, 1, "is not a multiple of num_kv_heads 3"},
      {{32, 5, 4096, 1000, 4}, 1, 1, "num_heads 32 is not a multiple of num_kv_heads 5"},
      {{32, 8, 4096, 1000, 2}, 1, 4, "num_layers 2 is smaller than pipeline-parallel size 4"},
      {{32, 8, 4096, 0, 2}, 1, 1, "model dims must be positive"},
      {{32, 8, 4096, 1000, 2}, 0, 1, "must be >= 1"},
  };
  for (const Case& c : cases) {
    auto s = ShardModel(c.dims, c.tp, c.pp);
    ASSERT_FALSE(s.ok()) << c.message;
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(s.status().message()), HasSubstr(c.message));
  }
}

// --- layer split ---

TEST(SplitLayersTest, EvenSplit) {
  auto r = SplitLayers(32, 4);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(*r, ElementsAre(LayerRange{0, 8}, LayerRange{8, 16}, LayerRange{16, 24}, LayerRange{24, 32}));
}

TEST(SplitLayersTest, RemainderGoesToEarlierStages) {
  auto r = SplitLayers(30, 4);  // 8, 8, 7, 7: the last stage also runs the LM head
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(*r, ElementsAre(LayerRange{0, 8}, LayerRange{8, 16}, LayerRange{16, 23}, LayerRange{23, 30}));
  auto one = SplitLayers(5, 1);
  ASSERT_TRUE(one.ok());
  EXPECT_THAT(*one, ElementsAre(LayerRange{0, 5}));
  auto tight = SplitLayers(3, 3);
  ASSERT_TRUE(tight.ok());
  for (const LayerRange& l : *tight) EXPECT_EQ(l.size(), 1);
}

// The last stage also runs the LM head: with its cost in layers the default split moves layers
// to the earlier stages so that the most expensive stage is as cheap as possible.
TEST(SplitLayersTest, LastStageExtraCostMovesLayersEarlier) {
  auto counts = [](int layers, int pp, double extra) {
    std::vector<int> c;
    const absl::StatusOr<std::vector<LayerRange>> ranges = SplitLayers(layers, pp, {}, extra);
    if (!ranges.ok()) return c;
    for (const LayerRange& r : *ranges) c.push_back(r.size());
    return c;
  };
  // Llama-3-8B: 32 layers, LM head ~2.41 layers. PP2: costs 17 | 15 + 2.41 (16 | 18.41 evenly).
  EXPECT_EQ(counts(32, 2, 2.41), (std::vector<int>{17, 15}));
  // PP4: 9, 9, 8, 6 + 2.41 = 8.41 (max 9); 9, 9, 9, 5 has the same maximum but a wider spread.
  EXPECT_EQ(counts(32, 4, 2.41), (std::vector<int>{9, 9, 8, 6}));
  // Llama-3-70B: 80 layers, LM head ~1.23 layers.
  EXPECT_EQ(counts(80, 2, 1.23), (std::vector<int>{41, 39}));
  // No extra cost: the even split, remainder on the earlier stages.
  EXPECT_EQ(counts(33, 4, 0.0), (std::vector<int>{9, 8, 8, 8}));
  EXPECT_EQ(counts(29, 3, 0.0), (std::vector<int>{10, 10, 9}));
  // A head far heavier than the layers still leaves the last stage one layer.
  EXPECT_EQ(counts(4, 2, 100.0), (std::vector<int>{3, 1}));
  EXPECT_EQ(counts(2, 2, 100.0), (std::vector<int>{1, 1}));
  // Explicit counts ignore the extra cost; a negative one is rejected.
  const std::vector<int> explicit_counts = {16, 16};
  EXPECT_EQ((*SplitLayers(32, 2, explicit_counts, 2.41))[1], (LayerRange{16, 32}));
  EXPECT_FALSE(SplitLayers(32, 2, {}, -1.0).ok());
  EXPECT_EQ(*StageLayers(32, 2, 1, {}, 2.41), (LayerRange{17, 32}));
}

TEST(SplitLayersTest, ParsesTheFlagsTextForm) {
  EXPECT_EQ(*ParseLayersPerStage("17,15"), (std::vector<int>{17, 15}));
  EXPECT_EQ(*ParseLayersPerStage(""), std::vector<int>{});
  const absl::Status bad = ParseLayersPerStage("17,x").status();
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad.message()), HasSubstr("'x' is not a number"));
}

TEST(SplitLayersTest, ExplicitCounts) {
  const std::vector<int> counts = {10, 12, 10};
  auto r = SplitLayers(32, 3, counts);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(*r, ElementsAre(LayerRange{0, 10}, LayerRange{10, 22}, LayerRange{22, 32}));
  auto stage = StageLayers(32, 3, 1, counts);
  ASSERT_TRUE(stage.ok());
  EXPECT_EQ(*stage, (LayerRange{10, 22}));
}

TEST(SplitLayersTest, RejectsBadSplits) {
  EXPECT_FALSE(SplitLayers(3, 4).ok());
  EXPECT_FALSE(SplitLayers(8, 0).ok());
  const std::vector<int> wrong_sum = {4, 5};
  EXPECT_THAT(std::string(SplitLayers(8, 2, wrong_sum).status().message()), HasSubstr("sums to 9"));
  const std::vector<int> wrong_len = {4, 4};
  EXPECT_THAT(std::string(SplitLayers(8, 3, wrong_len).status().message()), HasSubstr("expected pp = 3"));
  const std::vector<int> empty_stage = {8, 0};
  EXPECT_THAT(std::string(SplitLayers(8, 2, empty_stage).status().message()),
              HasSubstr("at least one layer"));
  EXPECT_FALSE(StageLayers(8, 2, 2).ok());
  EXPECT_FALSE(StageLayers(8, 2, -1).ok());
}

TEST(SplitLayersTest, StageLayersMatchesSplit) {
  for (int pp = 1; pp <= 7; ++pp) {
    auto all = SplitLayers(29, pp);
    ASSERT_TRUE(all.ok());
    int covered = 0;
    for (int s = 0; s < pp; ++s) {
      auto one = StageLayers(29, pp, s);
      ASSERT_TRUE(one.ok());
      EXPECT_EQ(*one, (*all)[s]);
      EXPECT_EQ(one->begin, covered);
      covered = one->end;
      if (s > 0) {
        EXPECT_LE((*all)[s].size(), (*all)[s - 1].size());
      }
    }
    EXPECT_EQ(covered, 29);
  }
}

}  // namespace
}  // namespace llm
