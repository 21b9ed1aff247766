// A DeviceCommunicator whose small all-reduces run as one kernel over NVLink peer memory (CUDA
// IPC) instead of NCCL. Tensor-parallel decode all-reduces (1..64 rows of a 4096..8192 hidden
// state, 8 KB .. 1 MB) are latency-bound, and NCCL spends several microseconds on each. Two
// kernels, by size:
//  - up to NvlinkOptions::push_capacity_bytes, the push kernel (kernels/cuda/comm/
//    push_all_reduce.h): every rank writes its data into every peer's receive buffer and polls its
//    own until the peers' data has arrived; one one-way NVLink trip;
//  - up to NvlinkOptions::capacity_bytes, the one-shot kernel (kernels/cuda/comm/
//    one_shot_all_reduce.h): one flag barrier plus one read of every peer's data.
//
// It wraps an NCCL DeviceCommunicator of the same group and runs on its stream and device:
// AllReduceSum of f32/f16/bf16 within those capacities takes one of the kernels, everything else
// (larger or integer all-reduces, AllGather, Broadcast, Send, Recv, Synchronize) is forwarded to
// NCCL. Callers keep using the DeviceCommunicator interface unchanged; both paths
// may be captured in CUDA graphs. Like NCCL, every rank must make the same sequence of calls.
//
// Declared in every build, defined by llm_parallel_nccl: without CUDA the factory returns the
// given communicator unchanged. cuda_runtime.h stays out of this header.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "kernels/core/dtype.h"
#include "parallel/mpi_communicator.h"
#include "parallel/nccl_communicator.h"

namespace llm {

struct NvlinkOptions {
  // Largest all-reduce, in bytes, taken by the one-shot kernel; larger ones go to NCCL. Rounded
  // down to a multiple of 16 * blocks. Each rank allocates twice this (one buffer per call
  // parity) plus a few KB of flags. Must be the same on every rank.
  size_t capacity_bytes = size_t{1} << 20;
  // Thread blocks of every one-shot call (a fixed grid: per-block epochs stay in step across
  // ranks). Must be the same on every rank; at most 128.
  int blocks = 32;
  // Longest time a block of the kernel spins for a peer before it traps (a CUDA error on the
  // stream, reported by Synchronize; the CUDA context is lost) instead of hanging forever.
  absl::Duration spin_timeout = absl::Seconds(30);
  // false: keep NCCL for everything (as does LLM_CUSTOM_ALLREDUCE=0 in any rank's environment).
  bool enable = true;
  // Offer the fused all-reduce + residual add + RMSNorm (Communicator::AllReduceAddRmsNorm).
  // false on any rank (or LLM_FUSED_ALLREDUCE_NORM=0 in any rank's environment): callers run the
  // one-shot all-reduce and their own norm kernel, for comparisons.
  bool fuse_add_rms_norm = true;
  // ... with the one-shot kernel only from this many rows: below it the one-shot fused kernel,
  // which reads each row's peer data on one block after the exchange, is no faster than the
  // all-reduce followed by a PDL-launched norm kernel (2 H200s, hidden 4096: 5.82 against 5.66 us
  // at 1 row, 6.22 against 6.03 at 16 rows, 8.25 against 9.02 at 64 rows). Sizes the push
  // kernel takes are fused only with push_fuse_add_rms_norm.
  int fuse_min_rows = 32;
  // Largest all-reduce, in bytes, taken by the push kernel (0: none; LLM_PUSH_ALLREDUCE=0 in any
  // rank's environment: none). Each rank allocates 3 * world_size times this. Must be the same on
  // every rank.
  size_t push_capacity_bytes = size_t{512} << 10;
  // Offer the push kernel's fused form (all-reduce + add + RMSNorm in one kernel) for the sizes it
  // takes. Off by default: on 2 H200s it is no faster than the push all-reduce followed by the
  // PDL-launched norm kernel (4.12 against 4.12 us at 1 row, 7.64 against 7.42 at 64 rows) and
  // the TP2 8B decode step is slower with it (3.138 against 3.085 ms at batch 1): the norm then
  // runs on one block per row after the gather instead of on a kernel of its own that launches
  // during it. Must be the same on every rank.
  bool push_fuse_add_rms_norm = false;
};

// What CreateNvlinkCommunicator decided (the same on every rank), for logs and tests.
struct NvlinkSetup {
  bool one_shot = false;            // true: the returned communicator has the one-shot path
  size_t capacity_bytes = 0;        // largest one-shot all-reduce in bytes (after rounding)
  bool fused_add_rms_norm = false;  // AllReduceAddRmsNorm offered (one_shot and enabled everywhere)
  size_t push_capacity_bytes = 0;   // largest push all-reduce in bytes (0: no push kernel)
  std::string reason;               // why not, when !one_shot
};

// Collective over `group` (the group of `nccl`, same ranks): every rank allocates a zeroed device
// region on nccl->device(), exports it with cudaIpcGetMemHandle, the handles are all-gathered
// over `group`, and every rank maps its peers' regions (cudaIpcOpenMemHandle). The one-shot path
// is used only when every rank can: world size in [2, 8], enabled on all ranks (options.enable
// and LLM_CUSTOM_ALLREDUCE != "0"), all ranks on one host, every peer's GPU visible and
// peer-accessible (cudaDeviceCanAccessPeer) from every rank's GPU, and every allocation and
// mapping succeeded. Otherwise every rank returns `nccl` itself, unchanged, and says why in
// *setup. All ranks take the same decision (it is made from all-gathered per-rank results).
//
// InvalidArgument on every rank when any rank's options are malformed, differ between ranks, or
// any rank's `nccl` has another rank/size than the group; for a null `nccl` (this rank only);
// errors of `group` as returned.
//
// `group` must outlive the returned communicator: its destructor synchronizes the stream and
// waits on a `group` barrier before unmapping and freeing the regions, because a peer may still
// be reading this rank's staging buffer for the last call after this rank finished it. (If that
// barrier fails, the regions are leaked rather than freed under a peer.)
absl::StatusOr<std::unique_ptr<DeviceCommunicator>> CreateNvlinkCommunicator(
    MpiCommunicator& group, std::unique_ptr<DeviceCommunicator> nccl, const NvlinkOptions& options,
    NvlinkSetup* setup = nullptr);

// Out of place: out[i] = sum over ranks of in[i] for i < count, enqueued on comm's stream; `out`
// may equal `in`. On a communicator made by CreateNvlinkCommunicator with the one-shot path and a
// size within one of its kernels' capacities, one kernel; otherwise a device copy in -> out and
// comm.AllReduceSum.
absl::Status AllReduceSumInto(DeviceCommunicator& comm, const void* in, void* out, size_t count, DType dtype);

}  // namespace llm
