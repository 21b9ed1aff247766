// bf16 rounding emulated on the float32 CPU backend (bf16_rounding_backend.h), against the
// Hugging Face float32 reference of every fixture. The emulator is checked first (no rounding is
// the oracle itself; a bf16 checkpoint survives weight rounding unchanged); then the table of what
// each stored bf16 value costs on these models, which the CUDA bf16 parity test uses as its
// yardstick (benchmarks/RESULTS.md quotes it).
#include "tests/runtime/bf16_rounding_backend.h"

#include <cstdio>

#include "gtest/gtest.h"

namespace llm::testing {
namespace {

TEST(Bf16RoundingTest, NoRoundingIsTheFloat32Oracle) {
  for (const char* name : kFixtureModels) {
    auto parity = Bf16EmulatedParity(name, 0);
    ASSERT_TRUE(parity.ok()) << parity.status();
    EXPECT_EQ(parity->positions, 4 * 24 + 1 + 7 + 33 + 100) << name;
    EXPECT_LE(parity->max_err, 1e-4) << name;
    EXPECT_EQ(parity->agreement(), 1.0) << name;
  }
}

TEST(Bf16RoundingTest, Bf16CheckpointSurvivesWeightRounding) {
  auto parity = Bf16EmulatedParity("llama3-tiny-bf16", kRoundWeights);
  ASSERT_TRUE(parity.ok()) << parity.status();
  EXPECT_LE(parity->max_err, 1e-4);
  EXPECT_EQ(parity->agreement(), 1.0);
  // A float32 checkpoint does not: the rounding moves its logits.
  parity = Bf16EmulatedParity("llama-tiny", kRoundWeights);
  ASSERT_TRUE(parity.ok()) << parity.status();
  EXPECT_GT(parity->max_err, 1e-3);
}

// Each rounding point alone, then all of them (what a bf16 engine does). On these small random
// models the top two logits are often close, so bf16 moves the top-1 choice: weights alone or the
// KV cache alone already take at least one fixture under 99% top-1 agreement, which is why the
// CUDA test's bf16 bar is this emulation's result on the same fixture, not a fixed 99%.
TEST(Bf16RoundingTest, WhatEachRoundingPointCosts) {
  std::printf("| rounded in bf16 |");
  for (const char* name : kFixtureModels) std::printf(" %s: top-1 / max err / mean err |", name);
  std::printf("\n| --- |");
  for (size_t i = 0; i < std::size(kFixtureModels); ++i) std::printf(" --- |");
  std::printf("\n");
  std::vector<Bf16PointName> rows(std::begin(kBf16PointNames), std::end(kBf16PointNames));
  rows.push_back({kRoundAll, "all of the above (a bf16 engine)"});
  for (const Bf16PointName& row : rows) {
    double worst_top1 = 1.0, worst_err = 0.0;
    std::printf("| %s |", row.name);
    for (const char* name : kFixtureModels) {
      auto parity = Bf16EmulatedParity(name, row.point);
      ASSERT_TRUE(parity.ok()) << parity.status();
      std::printf(" %.2f%% / %.4f / %.4f |", 100 * parity->agreement(), parity->max_err, parity->mean_err());
      worst_top1 = std::min(worst_top1, parity->agreement());
      worst_err = std::max(worst_err, parity->max_err);
    }
    std::printf("\n");
    if (row.point == kRoundWeights || row.point == kRoundQkvCache) {
      EXPECT_LT(worst_top1, 0.99) << row.name;
    }
    if (row.point == kRoundAll) {  // the band the CUDA backend's bf16 results are held to
      EXPECT_LT(worst_top1, 0.99);
      EXPECT_GT(worst_top1, 0.95);
      EXPECT_GT(worst_err, 0.02);
      EXPECT_LT(worst_err, 0.05);
    }
  }
}

}  // namespace
}  // namespace llm::testing
