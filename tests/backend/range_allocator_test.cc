// RangeAllocator, the CUDA device arena's bookkeeping, on the CPU: alignment, first fit, merging
// of freed neighbours, exhaustion, and random allocate/free sequences against a plain model of
// the live ranges (first fit recomputed from the gaps between them).
#include "engine/backend/cuda/range_allocator.h"

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace llm {
namespace {

constexpr size_t kAlign = RangeAllocator::kDefaultAlignment;

size_t Take(RangeAllocator& r, size_t bytes) {
  absl::StatusOr<size_t> offset = r.Allocate(bytes);
  EXPECT_TRUE(offset.ok()) << offset.status();
  return offset.ok() ? *offset : std::numeric_limits<size_t>::max();
}

TEST(RangeAllocatorTest, OffsetsAndSizesAreAligned) {
  RangeAllocator r(1000 * kAlign + 100);  // the ragged end is not usable
  EXPECT_EQ(r.stats().capacity, 1000 * kAlign);
  EXPECT_EQ(Take(r, 1), 0u);
  EXPECT_EQ(Take(r, kAlign), kAlign);
  EXPECT_EQ(Take(r, kAlign + 1), 2 * kAlign);  // rounded up to two units
  EXPECT_EQ(Take(r, 3), 4 * kAlign);
  EXPECT_EQ(r.stats().in_use, 5 * kAlign);
  EXPECT_EQ(r.stats().allocations, 4);

  RangeAllocator small(1000, 64);
  EXPECT_EQ(small.stats().capacity, 960u);
  EXPECT_EQ(Take(small, 65), 0u);
  EXPECT_EQ(Take(small, 1), 128u);
}

TEST(RangeAllocatorTest, FirstFitTakesTheLowestRangeThatFits) {
  RangeAllocator r(16 * kAlign);
  Take(r, kAlign);
  const size_t b = Take(r, 2 * kAlign);
  Take(r, kAlign);
  const size_t d = Take(r, kAlign);
  ASSERT_EQ(b, kAlign);
  ASSERT_EQ(d, 4 * kAlign);
  r.Free(b);                                   // a hole of two units at 1
  r.Free(d);                                   // merges into the tail: [4, 16)
  EXPECT_EQ(Take(r, kAlign), kAlign);          // the hole, not the larger tail
  EXPECT_EQ(Take(r, 2 * kAlign), 4 * kAlign);  // what is left of the hole is too small
  EXPECT_EQ(Take(r, kAlign), 2 * kAlign);      // ... but fits this one
  EXPECT_EQ(r.stats().largest_free, 10 * kAlign);
}

TEST(RangeAllocatorTest, FreedNeighboursMergeOnBothSides) {
  RangeAllocator r(8 * kAlign);
  const size_t a = Take(r, 2 * kAlign), b = Take(r, 2 * kAlign), c = Take(r, 2 * kAlign),
               d = Take(r, 2 * kAlign);
  EXPECT_EQ(r.stats().largest_free, 0u);
  r.Free(a);
  r.Free(c);
  EXPECT_EQ(r.stats().largest_free, 2 * kAlign);
  r.Free(b);  // merges with a (left) and c (right)
  EXPECT_EQ(r.stats().largest_free, 6 * kAlign);
  EXPECT_EQ(Take(r, 6 * kAlign), a);
  r.Free(a);
  r.Free(d);  // merges with the range on its left only
  EXPECT_EQ(r.stats().largest_free, 8 * kAlign);
  EXPECT_EQ(r.stats().in_use, 0u);
  EXPECT_EQ(Take(r, 8 * kAlign), 0u);  // one piece again
}

TEST(RangeAllocatorTest, ExhaustionIsAnErrorWithTheSizes) {
  RangeAllocator r(4 * kAlign);
  EXPECT_EQ(r.Allocate(0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(r.Allocate(4 * kAlign + 1).status().code(), absl::StatusCode::kResourceExhausted);
  // A size near the top of size_t must not wrap around when rounded up.
  EXPECT_EQ(r.Allocate(std::numeric_limits<size_t>::max()).status().code(),
            absl::StatusCode::kResourceExhausted);
  const size_t a = Take(r, kAlign);
  Take(r, kAlign);
  const size_t c = Take(r, kAlign);
  r.Free(a);
  r.Free(c);  // merges with the tail: two units free, but not in one piece with a
  absl::StatusOr<size_t> big = r.Allocate(3 * kAlign);
  ASSERT_EQ(big.status().code(), absl::StatusCode::kResourceExhausted);
  const std::string message(big.status().message());
  EXPECT_NE(message.find(std::to_string(3 * kAlign)), std::string::npos) << message;  // what was asked
  EXPECT_NE(message.find("largest free range " + std::to_string(2 * kAlign)), std::string::npos) << message;
  EXPECT_EQ(Take(r, 2 * kAlign), 2 * kAlign);
  EXPECT_EQ(r.stats().in_use, 3 * kAlign);  // the failures changed nothing
}

TEST(RangeAllocatorTest, PeakIsTheHighWaterMark) {
  RangeAllocator r(64 * kAlign);
  const size_t a = Take(r, 10 * kAlign);
  const size_t b = Take(r, 20 * kAlign);
  r.Free(a);
  r.Free(b);
  Take(r, 5 * kAlign);
  EXPECT_EQ(r.stats().in_use, 5 * kAlign);
  EXPECT_EQ(r.stats().peak_in_use, 30 * kAlign);
}

TEST(RangeAllocatorDeathTest, DoubleFreeAborts) {
  RangeAllocator r(4 * kAlign);
  const size_t a = Take(r, kAlign);
  r.Free(a);
  EXPECT_DEATH(r.Free(a), "");
  EXPECT_DEATH(r.Free(3 * kAlign), "");
}

// The reference: live ranges by offset. First fit is the first gap between them (in offset order)
// that holds the rounded size.
struct Reference {
  size_t capacity;
  std::map<size_t, size_t> live;  // offset -> rounded bytes

  static size_t Round(size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }
  template <typename F>
  void ForEachGap(F f) const {
    size_t at = 0;
    for (const auto& [offset, bytes] : live) {
      if (offset > at) f(at, offset - at);
      at = offset + bytes;
    }
    if (capacity > at) f(at, capacity - at);
  }
  // The offset first fit must give, or capacity when nothing fits.
  size_t FirstFit(size_t bytes) const {
    size_t found = capacity;
    ForEachGap([&](size_t offset, size_t size) {
      if (found == capacity && size >= Round(bytes)) found = offset;
    });
    return found;
  }
  size_t LargestGap() const {
    size_t largest = 0;
    ForEachGap([&](size_t, size_t size) { largest = std::max(largest, size); });
    return largest;
  }
  size_t InUse() const {
    size_t sum = 0;
    for (const auto& [offset, bytes] : live) sum += bytes;
    return sum;
  }
};

class RangeAllocatorRandomTest : public ::testing::TestWithParam<uint32_t> {};

TEST_P(RangeAllocatorRandomTest, MatchesTheReference) {
  std::mt19937 rng(GetParam());
  const size_t capacity = size_t{1} << 20;
  RangeAllocator r(capacity);
  Reference ref{capacity, {}};
  std::vector<size_t> live;  // offsets, in allocation order
  size_t peak = 0;
  std::uniform_int_distribution<int> coin(0, 99);
  for (int step = 0; step < 4000; ++step) {
    SCOPED_TRACE(step);
    if (!live.empty() && coin(rng) < 45) {
      const size_t i = std::uniform_int_distribution<size_t>(0, live.size() - 1)(rng);
      r.Free(live[i]);
      ref.live.erase(live[i]);
      live[i] = live.back();
      live.pop_back();
    } else {
      // Mostly small buffers, some large, now and then one that is unlikely to fit.
      const int kind = coin(rng);
      const size_t hi = kind < 70 ? 2048 : kind < 97 ? (64 << 10) : capacity / 2;
      const size_t bytes = std::uniform_int_distribution<size_t>(1, hi)(rng);
      const size_t expected = ref.FirstFit(bytes);
      absl::StatusOr<size_t> offset = r.Allocate(bytes);
      if (expected == capacity) {
        ASSERT_EQ(offset.status().code(), absl::StatusCode::kResourceExhausted) << bytes;
      } else {
        ASSERT_TRUE(offset.ok()) << offset.status();
        ASSERT_EQ(*offset, expected) << bytes;
        ASSERT_EQ(*offset % kAlign, 0u);
        // No overlap with the neighbours on either side.
        auto next = ref.live.lower_bound(*offset);
        if (next != ref.live.end()) {
          ASSERT_LE(*offset + Reference::Round(bytes), next->first);
        }
        if (next != ref.live.begin()) {
          ASSERT_LE(std::prev(next)->first + std::prev(next)->second, *offset);
        }
        ASSERT_LE(*offset + Reference::Round(bytes), capacity);
        ref.live.emplace(*offset, Reference::Round(bytes));
        live.push_back(*offset);
      }
    }
    peak = std::max(peak, ref.InUse());
    // Every byte accounted for: in use + free = capacity, and the same largest hole.
    const RangeAllocatorStats s = r.stats();
    ASSERT_EQ(s.in_use, ref.InUse());
    ASSERT_EQ(s.largest_free, ref.LargestGap());
    ASSERT_EQ(s.allocations, static_cast<int64_t>(live.size()));
    ASSERT_EQ(s.peak_in_use, peak);
  }
  for (size_t offset : live) r.Free(offset);
  EXPECT_EQ(r.stats().in_use, 0u);
  EXPECT_EQ(r.stats().largest_free, capacity);  // every neighbour merged back into one range
}

INSTANTIATE_TEST_SUITE_P(Seeds, RangeAllocatorRandomTest, ::testing::Values(1u, 2u, 3u, 42u, 2024u));

}  // namespace
}  // namespace llm
