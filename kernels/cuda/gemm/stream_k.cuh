// Stream-K over one block an SM: the (tile, K step) iterations of a whole GEMM are cut into
// gridDim.x equal contiguous ranges, so every SM streams the same number of weight bytes whatever
// N and K are. A tile that straddles blocks is summed by its last contributor from per-block
// float32 slots in block order (a counter a tile, reset by that contributor), so results do not
// depend on arrival order: graph replays equal eager runs bit for bit. Shared by the few-rows GEMM
// and the FP8 and int4 warpgroup GEMMs (these two through StreamKSumStraddle); the workspace holds
// the counters first, then two slots a block.
#pragma once

#include <cstddef>
#include <cstdint>

namespace llm::cuda {

// Dynamic shared memory a block of a one-block-an-SM stream-K grid asks for, given the `used`
// bytes it needs: at least more than half of an SM's 228 KB, so that no SM ever holds two of the
// grid's blocks (the equal shares assume a block an SM), whatever the ring takes.
constexpr int StreamKBlockSmemBytes(int used) { return used > (116 << 10) ? used : (116 << 10); }

// Bytes of the tile counters at the workspace's front (they are zero between calls).
inline size_t StreamKCountersBytes(int num_sms) {
  return (static_cast<size_t>(num_sms) * sizeof(unsigned) + 255) / 256 * 256;
}

// The workspace that serves every call of a kernel whose tiles hold at most `max_slot_floats` sums,
// on a GPU of `num_sms` SMs (one block an SM, two slots a block).
inline size_t StreamKWorkspaceBytes(int num_sms, int max_slot_floats) {
  return StreamKCountersBytes(num_sms) + 2 * static_cast<size_t>(num_sms) * max_slot_floats * sizeof(float);
}

// A call's view of the workspace: the counters first, at a place no call's slots reach (they must
// be zero at every call's start), then `blocks` blocks' two slots of `slot_floats` sums; null
// pointers if `bytes` do not hold them.
struct StreamKSlots {
  unsigned* counters = nullptr;
  float* slots = nullptr;
};
inline StreamKSlots StreamKSlotsIn(void* data, size_t bytes, int num_sms, int blocks, int slot_floats) {
  const size_t need = StreamKCountersBytes(num_sms) + 2 * static_cast<size_t>(blocks) * slot_floats * sizeof(float);
  if (data == nullptr || need > bytes) return {};
  return {static_cast<unsigned*>(data),
          reinterpret_cast<float*>(static_cast<char*>(data) + StreamKCountersBytes(num_sms))};
}

// The first iteration of `block`'s range.
__device__ __forceinline__ int StreamKRangeBegin(int block, int total, int blocks) {
  return static_cast<int>(static_cast<int64_t>(block) * total / blocks);
}

// The block whose range holds iteration `it`.
__device__ __forceinline__ int StreamKBlockOf(int it, int total, int blocks) {
  int b = static_cast<int>(static_cast<int64_t>(it) * blocks / total);
  while (b + 1 < blocks && StreamKRangeBegin(b + 1, total, blocks) <= it) ++b;
  while (b > 0 && StreamKRangeBegin(b, total, blocks) > it) --b;
  return b;
}

// A straddling tile's contributors [first, last] and their slots: a block has two, its range's
// first segment (if it starts inside a tile) and its last (if it ends inside one, as the tile's
// first contributor does). The counter is the first contributor's.
struct StreamKStraddle {
  int first = 0, last = 0;
  __device__ __forceinline__ StreamKStraddle(int tile, int steps, int total, int blocks)
      : first(StreamKBlockOf(tile * steps, total, blocks)),
        last(StreamKBlockOf(tile * steps + steps - 1, total, blocks)) {}
  __device__ __forceinline__ int64_t Slot(int block) const { return 2 * block + (block == first ? 1 : 0); }
};

// Synchronizes the `kThreads` threads (whole warps) that use named barrier `kId` (not 0: that is
// __syncthreads').
template <int kId, int kThreads>
__device__ __forceinline__ void NamedBarrierSync() {
  asm volatile("bar.sync %0, %1;" ::"n"(kId), "n"(kThreads) : "memory");
}

// A block's sums of a tile that straddles blocks: each of `kThreads` threads (thread `tid`, named
// barrier `kBarrier`) stores its kFloats sums (a multiple of 4) in this block's slot of
// `slot_floats`; the tile's last contributor to arrive (the first contributor's counter says;
// `flag` a word of shared memory) adds every contributor's slot in block order into `sums`,
// resets the counter and returns true: it then holds the tile's total. Others return false.
template <int kThreads, int kBarrier, int kFloats>
__device__ __forceinline__ bool StreamKSumStraddle(float (&sums)[kFloats], const StreamKStraddle& straddle,
                                                   float* slots, int slot_floats, unsigned* counters,
                                                   unsigned* flag, int tid) {
  static_assert(kFloats % 4 == 0, "sums go as float4");
  auto slot = [&](int b, int q) {
    return reinterpret_cast<float4*>(slots + straddle.Slot(b) * slot_floats) + q * kThreads + tid;
  };
#pragma unroll
  for (int q = 0; q < kFloats / 4; ++q)
    __stcg(slot(blockIdx.x, q), make_float4(sums[4 * q], sums[4 * q + 1], sums[4 * q + 2], sums[4 * q + 3]));
  // One fence, by the thread that counts, after the barrier: it orders every thread's slot stores
  // (seen by it through the barrier) before the count, and the count before the reads below.
  NamedBarrierSync<kBarrier, kThreads>();
  if (tid == 0) {
    __threadfence();
    *flag = atomicAdd(&counters[straddle.first], 1u) == static_cast<unsigned>(straddle.last - straddle.first);
    __threadfence();
  }
  NamedBarrierSync<kBarrier, kThreads>();
  if (!*flag) return false;
  // The last to arrive adds every contributor's slot in block order. The slots' loads go kChunk
  // contributors at a time (as many as 16 float4 registers hold), all issued before any is added,
  // so that their L2 round trips overlap (FP8 step at 32 and 64 rows -0.4% on an H200).
  constexpr int kQuads = kFloats / 4;
  constexpr int kChunk = kQuads >= 16 ? 1 : 16 / kQuads;
#pragma unroll
  for (int r = 0; r < kFloats; ++r) sums[r] = 0.0f;
  for (int b0 = straddle.first; b0 <= straddle.last; b0 += kChunk) {
    float4 p[kChunk][kQuads];
#pragma unroll
    for (int c = 0; c < kChunk; ++c)
#pragma unroll
      for (int q = 0; q < kQuads; ++q)
        p[c][q] = b0 + c <= straddle.last ? __ldcg(slot(b0 + c, q)) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
    for (int c = 0; c < kChunk; ++c)
#pragma unroll
      for (int q = 0; q < kQuads; ++q)
        sums[4 * q] += p[c][q].x, sums[4 * q + 1] += p[c][q].y, sums[4 * q + 2] += p[c][q].z,
            sums[4 * q + 3] += p[c][q].w;
  }
  if (tid == 0) counters[straddle.first] = 0;  // every contributor has arrived: zero for the next call
  return true;
}

}  // namespace llm::cuda
