// Push all-reduce over NVLink peer memory for the smallest, most latency-bound tensor-parallel
// all-reduces (decode: 1..64 rows of the hidden state). Where the one-shot kernel
// (one_shot_all_reduce.h) stages its input locally, raises a flag in every peer and then reads
// every peer's data across NVLink (a flag's one-way trip plus a read's round trip), this kernel
// writes its input straight into every peer's receive buffer and polls its own buffer until the
// peers' data is there: one one-way NVLink trip, no flags. Arrival is detected from the data
// itself ("Lamport" buffers): a receive buffer holds an all-ones pattern wherever no data has
// arrived, a value no sender ever writes.
//
// Each rank owns one device region (allocated, exported and mapped into the peers by the caller,
// e.g. parallel/nvlink_communicator.cc); PushLayout says what lives where in it:
//
//   recv[phase 0..2][src rank 0..world)   capacity_bytes each: what `src` sent in calls of that
//                                         phase; all-ones (0xff bytes) where nothing is pending
//   counter[block 0..blocks)              uint64: calls made by `block` of this rank (own use)
//
// Per call, block b of every rank: reads and bumps its counter (the call's phase is count % 3),
// then for its element chunk (fixed by the call's size and the block index):
//   1. stores its input into recv[phase][own rank] of every peer (an input element that is the
//      all-ones pattern, a NaN in f32, f16 and bf16, is sent as the NaN with the sign bit clear);
//   2. polls recv[phase][src] of its own region for every peer src until no element of the chunk
//      is all-ones, sums in float32 in rank order (its own input in its own place, sent-form, so
//      all ranks produce the same bits), writes the output;
//   3. writes all-ones back over what it read (the buffer is ready for the phase's next call).
//
// Why three phases suffice: a peer writes recv[p] of this rank in call k + 3 only after finishing
// call k + 2, which needed this rank's data of call k + 2, which this rank sends after its call
// k + 1 kernel has completed (the kernels wait for their predecessor, see below), hence after all
// of call k's step 3 (every block). Consecutive calls use different phases, so a rank one call
// ahead never writes into a buffer still being read. Chunk bounds may change from call to call
// (different sizes): every element written is reset by the block that read it, so untouched and
// reset elements alike are all-ones at the next use.
//
// Memory ordering: data is detected element by element (aligned 2- and 4-byte stores are never
// torn), so neither a fence nor a flag is needed; polls and peer stores are volatile (no L1, not
// merged or dropped by the compiler).
//
// The kernels are launched with programmatic dependent launch and wait for their predecessor
// (griddepcontrol.wait) before touching counters or data. A peer that never sends (crashed, or
// made a different sequence of calls) would spin a block forever: the wait is bounded by
// `timeout_ns` of %globaltimer, after which the kernel prints the rank, block and call and traps
// (a sticky CUDA error on the stream; the process must restart, as after any device fault).
//
// Every rank must make the same sequence of calls (same counts, dtypes and kinds, in the same
// order) on one stream; the counters live in device memory, so calls may be captured in CUDA
// graphs and replayed. The two kinds of call (plain and fused) share counters and buffers and
// may follow each other in any order.
#pragma once

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/core/dtype.h"
#include "kernels/cuda/common/stream.h"

namespace llm::cuda {

inline constexpr int kPushMaxRanks = 8;
inline constexpr int kPushMaxBlocks = 128;
inline constexpr int kPushThreads = 512;
inline constexpr int kPushPhases = 3;

struct PushLayout {
  int blocks = 0;
  int world_size = 0;
  size_t capacity_bytes = 0;  // the largest call in bytes; a multiple of 16

  constexpr size_t recv_offset(int phase, int src) const {
    return (static_cast<size_t>(phase) * world_size + src) * capacity_bytes;
  }
  constexpr size_t recv_bytes() const {
    return kPushPhases * static_cast<size_t>(world_size) * capacity_bytes;
  }
  constexpr size_t counter_offset() const { return recv_bytes(); }
  constexpr size_t region_bytes() const { return counter_offset() + sizeof(uint64_t) * blocks; }
};

// InvalidArgument when blocks is outside [1, kPushMaxBlocks], world_size outside
// [2, kPushMaxRanks] or the capacity (rounded down to 16 bytes) is zero.
absl::StatusOr<PushLayout> MakePushLayout(size_t capacity_bytes, int blocks, int world_size);

// Prepares a freshly allocated region on the current device (synchronously): receive buffers
// all-ones, counters zero. Must complete on every rank before any rank's first call.
absl::Status InitPushRegion(void* region, const PushLayout& layout);

struct PushPeers {
  void* regions[kPushMaxRanks] = {};  // regions[r]: rank r's region (own one: local memory)
  int rank = 0;
  PushLayout layout;  // layout.world_size ranks
  uint64_t timeout_ns = 30'000'000'000ull;
};

// True when `count` elements of `dtype` (f32/f16/bf16) fit one receive buffer.
bool PushFits(const PushLayout& layout, DType dtype, size_t count);

// out[i] = sum over ranks of in[i], i < count; `out` may equal `in`, any alignment (16-byte
// aligned in/out take the vector path). InvalidArgument when !PushFits or `peers` is malformed.
absl::Status LaunchPushAllReduce(const PushPeers& peers, DType dtype, const void* in, void* out, size_t count,
                                 Stream stream);

// The tensor-parallel epilogue of a row-parallel projection in one kernel, rows x dim row-major:
//   d = sum over ranks of delta (rounded to dtype, as LaunchPushAllReduce);
//   residual = residual + d;  out = weight * residual * rsqrt(mean(residual^2) + eps)
// with the arithmetic of LaunchRmsNorm. Block b sends element chunk b of delta (as the
// plain kernel) and normalizes rows [b * r, (b + 1) * r), r = ceil(rows / blocks). `delta` is only read.
// InvalidArgument when rows * dim does not fit.
absl::Status LaunchPushAllReduceAddRmsNorm(const PushPeers& peers, DType dtype, const void* delta,
                                           void* residual, const void* weight, float eps, void* out,
                                           size_t rows, size_t dim, Stream stream);

}  // namespace llm::cuda
