// Internal: what the attention kernels share (sequence lookup, the per-query key range).
#pragma once

#include "kernels/cuda/attention/paged_attention.h"
#include "kernels/cuda/common/device_utils.cuh"
#include "kernels/cuda/common/mma_sync.cuh"  // CpAsync16 and its groups

namespace llm::cuda::attention {

constexpr float kLog2e = 1.4426950408889634f;

// The sequence owning token row t: the last s with query_start[s] <= t (binary search).
__device__ __forceinline__ int FindSequence(const int32_t* query_start, int num_seqs, int64_t t) {
  int lo = 0, hi = num_seqs - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) >> 1;
    if (query_start[mid] <= t)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

// A key's place in a paged cache ([page][kv_heads][block_size][head_dim]): its block-table
// entry and slot. kPow2Pages: block_size is a power of two and page_shift its log2, so this takes a
// shift and a mask (in the attention loops a division cost as much as a tile's softmax).
struct PagedKeySlot {
  int block, slot;
};
template <bool kPow2Pages>
__device__ __forceinline__ PagedKeySlot LocateKey(int key, int block_size, int page_shift) {
  if constexpr (kPow2Pages) return {key >> page_shift, key & (block_size - 1)};
  return {key / block_size, key % block_size};
}

inline constexpr int kNoBlockClamp = 0x7fffffff;  // last_block for callers whose keys are in range

// Element offset of the row in slot `slot` of page `page` for KV head `kvh`.
__device__ __forceinline__ int64_t PagedRowOffsetInPage(int64_t page, int slot, int kvh, int kv_heads, int block_size,
                                                        int head_dim) {
  return ((page * kv_heads + kvh) * block_size + slot) * static_cast<int64_t>(head_dim);
}

// Element offset of that key's row for KV head `kvh`, through the sequence's block-table row. The
// table index is clamped to last_block, so that callers may compute addresses for keys past the
// context without a branch (they must not read them).
__device__ __forceinline__ int64_t PagedRowOffset(const int32_t* table_row, PagedKeySlot at, int kvh, int kv_heads,
                                                  int block_size, int last_block, int head_dim) {
  return PagedRowOffsetInPage(table_row[min(at.block, last_block)], at.slot, kvh, kv_heads, block_size, head_dim);
}

// How a decode launch splits the work (chosen on the host, paged_attention.cu).
struct DecodeSplit {
  int head_tiles = 1;  // blocks per KV head: ceil(group / G)
  int splits = 1;      // context slices per (token, KV head, head tile)
  // Decode kernel: the fewest keys a slice takes. Each sequence's slices are sized from its own
  // context (a CUDA graph is captured for the longest one): n = min(splits, keys / min_chunk)
  // slices (at least one) of chunk = keys / n keys rounded up to 32, slice z starting z * chunk
  // keys after the first visible key; short contexts use fewer slices.
  int min_chunk = 0;
  float* part_acc = nullptr;  // splits > 1: [token, head, split, head_dim] unnormalized outputs
  float2* part_ml = nullptr;  // [token, head, split]: running max (log2 units) and sum
  // Decode kernel, splits > 1: one arrival counter per (token, KV head, head tile) block row, zero
  // between calls (the last slice to finish merges the partials and resets it).
  unsigned* arrivals = nullptr;
  // The decode grid's x is the (KV head, head tile) rows and y the tokens (up to 65535 of them),
  // instead of x the tokens: the hardware dispatches blocks in x-fastest order, so a sequence's
  // KV heads start together and read neighbouring runs of the same pages (0.3-1.0% off the 8B
  // step at 32-256 sequences on an H200; benchmarks/RESULTS.md, thirtieth session).
  bool heads_fastest = false;
};

}  // namespace llm::cuda::attention
