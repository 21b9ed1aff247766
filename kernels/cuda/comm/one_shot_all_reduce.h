// One-shot all-reduce over NVLink peer memory, for small (latency-bound) tensor-parallel
// all-reduces: every rank reads every peer's data directly and sums it, in one kernel with one
// flag barrier, instead of NCCL's ring/tree steps.
//
// Each rank owns one device region (allocated, zeroed, exported and mapped into the peers by the
// caller, e.g. parallel/nvlink_communicator.cc); OneShotLayout says what lives where in it:
//
//   staging[parity 0..1][block 0..blocks)   slot_bytes each: this rank's copy of its input chunks
//   signal[block][src rank 0..kMaxRanks)    uint64: last epoch that `src` published for `block`
//   epoch[block]                            uint64: calls made by `block` of this rank (own use)
//
// The kernel always runs `blocks` blocks; block b owns element chunk b of every call and staging
// slot b of each parity (the fused add + RMSNorm kernel below: row chunk b, the same slots and
// epochs, so the two kinds of call may follow each other in any order). Per call, block b of
// every rank:
//   1. bumps its epoch e (parity e & 1) and copies its input chunk into its own staging slot;
//   2. publishes e into signal[b][rank] of every peer (release store, system scope);
//   3. waits until signal[b][src] >= e for every peer src in its own region (acquire loads);
//   4. reads chunk b from every rank's staging slot (L1 bypassed), sums in float32 in rank order
//      0, 1, ..., n-1 (so all ranks produce the same bits) and writes it to the output.
// Nothing else synchronizes the ranks: the epochs live in device memory, so a call can be
// captured in a CUDA graph and replayed, and every rank must make the same sequence of calls
// (same counts and dtypes, in the same order), each on one stream per rank.
//
// Why slot b can be overwritten safely (a rank is at most one call ahead of any peer, per
// block): rank r's block b writes slot (b, parity of e) in call e + 2 only after passing step 3 of
// call e + 1, i.e. after every peer q's block b has published e + 1; q publishes e + 1 in call
// e + 1, which it starts only after finishing call e, including its step-4 reads of r's slot
// (b, parity of e). Conversely, when r's block b reads q's slot in call e, q may already be in
// call e + 1 (it writes the other parity) but cannot be in e + 2 before r has published e + 1.
// Because a slot belongs to a block, not to an element range, this holds even when consecutive
// calls have different sizes (different chunk bounds). Waiting for `>= e` (not `== e`) accepts a
// peer that already published e + 1.
//
// Memory ordering: the staging stores of all threads of block b are ordered before the release
// store of step 2 by __syncthreads() (release is cumulative at system scope); the acquire load of
// step 3 is ordered before every thread's step-4 loads by __syncthreads(); step-4 loads use
// ld.global.cg so that no line of a peer's slot from an earlier call is served from L1.
//
// A peer that never arrives (crashed, or made a different sequence of calls) would spin a block
// forever: the wait is bounded by `timeout_ns` of %globaltimer, after which the kernel prints the
// rank, block and epoch and executes __trap(). That turns the hang into a sticky asynchronous
// CUDA error (typically cudaErrorLaunchFailure) reported by the next synchronizing call; the CUDA
// context is unusable afterwards and the process must be restarted, as after any device fault.
//
// Both kernels are launched with programmatic dependent launch and wait for their predecessor
// (griddepcontrol.wait) before touching the epochs or any data, so only their launch overlaps the
// previous kernel.
//
// Block b of a rank waits only for block b of its peers, never for another block of its own grid,
// so no grid-wide co-residency is needed; a block that cannot start yet (GPU busy with other
// kernels) only delays its counterparts. `blocks` is kept far below the SM count.
#pragma once

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/core/dtype.h"
#include "kernels/cuda/common/stream.h"

namespace llm::cuda {

inline constexpr int kOneShotMaxRanks = 8;
inline constexpr int kOneShotMaxBlocks = 128;
inline constexpr int kOneShotThreads = 512;

// Where staging, signals and epochs live in one rank's region (the same on every rank). The
// accessors are constexpr so that device code can call them.
struct OneShotLayout {
  int blocks = 0;
  size_t slot_bytes = 0;  // staging bytes of one block for one parity; a multiple of 16

  // Bytes of one parity buffer usable by one call: the largest all-reduce in bytes.
  constexpr size_t capacity_bytes() const { return static_cast<size_t>(blocks) * slot_bytes; }
  constexpr size_t signal_offset() const { return 2 * capacity_bytes(); }
  constexpr size_t epoch_offset() const {
    return signal_offset() + sizeof(uint64_t) * blocks * kOneShotMaxRanks;
  }
  // Total region size; the region must be zeroed before its first use.
  constexpr size_t region_bytes() const { return epoch_offset() + sizeof(uint64_t) * blocks; }
};

// The layout for `blocks` blocks holding up to `capacity_bytes` per call, rounded down to a
// multiple of 16 * blocks. InvalidArgument when blocks is outside [1, kOneShotMaxBlocks] or the
// capacity is below 16 * blocks.
absl::StatusOr<OneShotLayout> MakeOneShotLayout(size_t capacity_bytes, int blocks);

// The regions of all ranks as mapped in this process, passed to the kernel by value.
struct OneShotPeers {
  void* regions[kOneShotMaxRanks] = {};  // regions[r]: rank r's region (own one: local memory)
  int rank = 0;
  int world_size = 0;  // 2..kOneShotMaxRanks
  OneShotLayout layout;
  uint64_t timeout_ns = 30'000'000'000ull;  // longest wait for a peer before __trap()
};

// True when `count` elements of `dtype` fit the staging buffers (and dtype is f32/f16/bf16).
bool OneShotFits(const OneShotLayout& layout, DType dtype, size_t count);

// out[i] = sum over ranks of in[i] for i < count, on `stream` (the current device must be the
// regions' device). `out` may equal `in`; any alignment (16-byte aligned in/out take the
// vectorized path). Every rank must call it with the same count and dtype, and calls on one set of
// regions must be serialized (one stream per rank: the epochs belong to the blocks, not to a call).
// InvalidArgument for other dtypes, sizes above the capacity or a malformed `peers`.
absl::Status LaunchOneShotAllReduce(const OneShotPeers& peers, DType dtype, const void* in, void* out,
                                    size_t count, Stream stream);

// True when a rows x dim tensor of `dtype` fits the fused kernel below: rows are split over the
// blocks (ceil(rows / blocks) per block), and one block's rows must fit its staging slot.
bool OneShotFitsRows(const OneShotLayout& layout, DType dtype, size_t rows, size_t dim);

// The tensor-parallel epilogue of a row-parallel projection in one kernel, for row-major
// rows x dim tensors of `dtype`:
//   d = sum over ranks of delta (as LaunchOneShotAllReduce, rounded to dtype);
//   residual = residual + d;  out = weight * residual * rsqrt(mean(residual^2) + eps)
// with the arithmetic of LaunchRmsNorm (kernels/cuda/norm/rms_norm.h). `delta` is only read.
// It takes part in the same call sequence as LaunchOneShotAllReduce (same epochs and slots): every
// rank must make this call where the others make it, with the same rows, dim and dtype.
// InvalidArgument when OneShotFitsRows is false, for a malformed `peers` or null buffers.
absl::Status LaunchOneShotAllReduceAddRmsNorm(const OneShotPeers& peers, DType dtype, const void* delta,
                                              void* residual, const void* weight, float eps, void* out,
                                              size_t rows, size_t dim, Stream stream);

}  // namespace llm::cuda
