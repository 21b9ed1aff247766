// RangeAllocator: the bookkeeping of DeviceArena, on offsets only. It hands out aligned byte
// ranges of [0, capacity) first-fit from a free list and merges a freed range with its free
// neighbours, so that memory given back at start-up (staging, resized scratch) can be carved
// again in one piece. It owns no memory and needs no GPU, so the policy is unit-tested on the
// CPU (tests/backend/range_allocator_test.cc). Not thread-safe: DeviceArena locks around it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>

#include "absl/status/statusor.h"

namespace llm {

struct RangeAllocatorStats {
  size_t capacity = 0;      // bytes managed (rounded down to the alignment)
  size_t in_use = 0;        // bytes handed out now, each range rounded up to the alignment
  size_t largest_free = 0;  // the largest Allocate that succeeds now
  size_t peak_in_use = 0;   // high-water mark of in_use
  int64_t allocations = 0;  // ranges handed out and not yet freed
};

class RangeAllocator {
 public:
  static constexpr size_t kDefaultAlignment = 256;  // cudaMalloc's: what kernels and cuBLASLt assume

  // `alignment` must be a power of two (a programmer error otherwise).
  explicit RangeAllocator(size_t capacity, size_t alignment = kDefaultAlignment);

  // The offset (a multiple of the alignment) of a free range of at least `bytes`: the lowest one
  // that fits. InvalidArgument for 0 bytes; ResourceExhausted, with the sizes, when no free range
  // is large enough.
  absl::StatusOr<size_t> Allocate(size_t bytes);
  // Gives back the range Allocate returned at `offset`. Freeing anything else (twice, or an
  // offset never handed out) is a bug in the caller and aborts.
  void Free(size_t offset);

  size_t alignment() const { return alignment_; }
  RangeAllocatorStats stats() const;

 private:
  size_t alignment_;
  size_t capacity_;
  std::map<size_t, size_t> free_;  // offset -> bytes; never two adjacent (they are merged)
  std::map<size_t, size_t> used_;  // offset -> bytes, as rounded
  size_t in_use_ = 0;
  size_t peak_in_use_ = 0;
};

}  // namespace llm
