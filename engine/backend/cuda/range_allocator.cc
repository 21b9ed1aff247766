#include "engine/backend/cuda/range_allocator.h"

#include <algorithm>
#include <iterator>

#include "absl/strings/str_cat.h"
#include "kernels/core/status.h"

namespace llm {

RangeAllocator::RangeAllocator(size_t capacity, size_t alignment)
    : alignment_(alignment), capacity_(capacity / std::max<size_t>(alignment, 1) * alignment) {
  LLM_CHECK(alignment > 0 && (alignment & (alignment - 1)) == 0);
  if (capacity_ > 0) free_.emplace(0, capacity_);
}

absl::StatusOr<size_t> RangeAllocator::Allocate(size_t bytes) {
  if (bytes == 0) return absl::InvalidArgumentError("RangeAllocator: cannot allocate 0 bytes");
  // First fit: the lowest free range that is large enough. Every free range starts and ends on
  // the alignment (all sizes handed out are rounded to it), so its offset is aligned as is. The
  // capacity is checked before rounding up, which could otherwise wrap around for absurd sizes.
  auto it = free_.end();
  size_t want = 0;
  if (bytes <= capacity_) {
    want = (bytes + alignment_ - 1) & ~(alignment_ - 1);
    it = std::find_if(free_.begin(), free_.end(), [want](const auto& r) { return r.second >= want; });
  }
  if (it == free_.end()) {
    const RangeAllocatorStats s = stats();
    return absl::ResourceExhaustedError(absl::StrCat("cannot allocate ", bytes, " bytes: ", s.in_use, " of ",
                                                     s.capacity, " bytes in use, largest free range ",
                                                     s.largest_free, " bytes"));
  }
  const size_t offset = it->first, free_bytes = it->second;
  free_.erase(it);
  if (free_bytes > want) free_.emplace(offset + want, free_bytes - want);
  used_.emplace(offset, want);
  in_use_ += want;
  peak_in_use_ = std::max(peak_in_use_, in_use_);
  return offset;
}

void RangeAllocator::Free(size_t offset) {
  auto used = used_.find(offset);
  LLM_CHECK(used != used_.end());  // a double free or a foreign offset
  size_t begin = offset, end = offset + used->second;
  in_use_ -= used->second;
  used_.erase(used);
  // Merge with the free neighbours on both sides, so that free ranges never touch.
  auto next = free_.lower_bound(offset);
  if (next != free_.end() && next->first == end) {
    end += next->second;
    next = free_.erase(next);
  }
  if (next != free_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == begin) {
      begin = prev->first;
      free_.erase(prev);
    }
  }
  free_.emplace(begin, end - begin);
}

RangeAllocatorStats RangeAllocator::stats() const {
  RangeAllocatorStats s;
  s.capacity = capacity_;
  s.in_use = in_use_;
  s.peak_in_use = peak_in_use_;
  s.allocations = static_cast<int64_t>(used_.size());
  for (const auto& [offset, bytes] : free_) s.largest_free = std::max(s.largest_free, bytes);
  return s;
}

}  // namespace llm
