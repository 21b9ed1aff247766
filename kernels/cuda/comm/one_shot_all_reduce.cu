#include "absl/strings/str_cat.h"
#include "kernels/cuda/comm/one_shot_all_reduce.h"
#include "kernels/cuda/comm/peer_memory.cuh"
#include "kernels/cuda/common/cuda_status.h"
#include "kernels/cuda/common/device_utils.cuh"
#include "kernels/cuda/norm/rms_norm_row.cuh"

namespace llm::cuda {
namespace {

using peer::DispatchRanks;
using peer::GlobalTimerNs;
using peer::LoadAcquireSys;
using peer::LoadCg;
using peer::LoadVecCg;
using peer::StoreReleaseSys;

template <int kRanks>
__device__ __forceinline__ char* RegionOf(const OneShotPeers& peers, int r) {
  return peer::RegionOf<kRanks>(peers.regions, r);
}
__device__ __forceinline__ uint64_t* SignalOf(char* region, const OneShotLayout& layout, int block, int src) {
  return reinterpret_cast<uint64_t*>(region + layout.signal_offset()) +
         static_cast<size_t>(block) * kOneShotMaxRanks + src;
}

// Spins until *flag >= epoch; past timeout_ns reports and traps (the error surfaces on the
// stream instead of a hang).
__device__ __forceinline__ void WaitForPeer(const uint64_t* flag, uint64_t epoch, uint64_t timeout_ns,
                                            int rank, int src) {
  uint64_t seen = LoadAcquireSys(flag);
  if (seen >= epoch) return;
  const uint64_t start = GlobalTimerNs();
  while ((seen = LoadAcquireSys(flag)) < epoch) {
    if (GlobalTimerNs() - start > timeout_ns)
      peer::ReportTimeoutAndTrap("one-shot all-reduce", rank, src, epoch, timeout_ns);
  }
}

// Steps 1-3 of a call for this block (see the header): bumps the block's epoch, copies the n
// elements at `src` into the block's staging slot of that epoch's parity, publishes the epoch to
// every peer and waits for theirs. Returns the slot's byte offset inside every rank's region.
// Called by all threads of the block.
template <typename T, int kRanks, bool kVec16>
__device__ __forceinline__ size_t StageAndExchange(const OneShotPeers& peers, const T* src, size_t n) {
  constexpr int kVec = Vec16<T>::kVec;
  const int block = blockIdx.x;
  const int tid = threadIdx.x;
  const int rank = peers.rank;
  const OneShotLayout& layout = peers.layout;
  char* const own_region = RegionOf<kRanks>(peers, rank);
  // Launched with programmatic dependent launch: nothing of the predecessor's output or of the previous
  // call's epochs may be touched before it has finished.
  AllowDependentLaunch();
  GridDependencyWait();

  // The epoch is read and bumped by this block only; the next call (a later kernel on the same
  // stream) sees the new value.
  __shared__ uint64_t epoch_shared;
  if (tid == 0) {
    uint64_t* epoch_slot = reinterpret_cast<uint64_t*>(own_region + layout.epoch_offset()) + block;
    const uint64_t e = *epoch_slot + 1;
    *epoch_slot = e;
    epoch_shared = e;
  }
  __syncthreads();
  const uint64_t epoch = epoch_shared;
  const size_t slot_offset = ((epoch & 1) * layout.blocks + block) * layout.slot_bytes;

  // 1. Own chunk into own staging slot. In place is safe: this block alone reads and writes its
  // element range, and all its reads of `src` happen before the barrier below.
  T* mine = reinterpret_cast<T*>(own_region + slot_offset);
  const size_t n_vec = kVec16 ? n / kVec : 0;
  if constexpr (kVec16) {
    for (size_t v = tid; v < n_vec; v += kOneShotThreads) StoreVec(mine + v * kVec, LoadVec(src + v * kVec));
  }
  for (size_t i = n_vec * kVec + tid; i < n; i += kOneShotThreads) mine[i] = src[i];
  __syncthreads();

  // 2 + 3. Thread p talks to peer p: publish, then wait for the peer's publication.
  if (tid < kRanks && tid != rank) {
    StoreReleaseSys(SignalOf(RegionOf<kRanks>(peers, tid), layout, block, rank), epoch);
    WaitForPeer(SignalOf(own_region, layout, block, tid), epoch, peers.timeout_ns, rank, tid);
  }
  __syncthreads();
  return slot_offset;
}

// Step 4 for 16-byte vector v of the staged chunk: the sum over ranks in rank order, float32
// accumulation, rounded once to T (so all ranks produce the same bits).
template <typename T, int kRanks>
__device__ __forceinline__ Vec16<T> SumVec(const T* const (&slots)[kRanks], size_t v) {
  constexpr int kVec = Vec16<T>::kVec;
  Vec16<T> parts[kRanks];  // all loads in flight before the first add
#pragma unroll
  for (int r = 0; r < kRanks; ++r) parts[r] = LoadVecCg(slots[r] + v * kVec);
  float acc[kVec];
#pragma unroll
  for (int e = 0; e < kVec; ++e) acc[e] = ToFloat(parts[0].v[e]);
#pragma unroll
  for (int r = 1; r < kRanks; ++r) {
#pragma unroll
    for (int e = 0; e < kVec; ++e) acc[e] += ToFloat(parts[r].v[e]);
  }
  Vec16<T> result;
#pragma unroll
  for (int e = 0; e < kVec; ++e) result.v[e] = FromFloat<T>(acc[e]);
  return result;
}
template <typename T, int kRanks>
__device__ __forceinline__ T SumScalar(const T* const (&slots)[kRanks], size_t i) {
  float acc = ToFloat(LoadCg(slots[0] + i));
#pragma unroll
  for (int r = 1; r < kRanks; ++r) acc += ToFloat(LoadCg(slots[r] + i));
  return FromFloat<T>(acc);
}

template <typename T, int kRanks>
__device__ __forceinline__ void SlotsAt(const OneShotPeers& peers, size_t slot_offset,
                                        const T* (&slots)[kRanks]) {
#pragma unroll
  for (int r = 0; r < kRanks; ++r)
    slots[r] = reinterpret_cast<const T*>(static_cast<char*>(peers.regions[r]) + slot_offset);
}

// Grid: peers.layout.blocks blocks of kOneShotThreads; block b reduces elements
// [b * chunk, min((b + 1) * chunk, count)), chunk a multiple of Vec16<T>::kVec (so every chunk of
// 16-byte aligned in/out starts aligned). kRanks == peers.world_size.
template <typename T, int kRanks, bool kVec16>
__global__ void __launch_bounds__(kOneShotThreads)
    OneShotAllReduceKernel(const OneShotPeers peers, const T* in, T* out, size_t count, size_t chunk) {
  static_assert(kRanks >= 2 && kRanks <= kOneShotMaxRanks);
  constexpr int kVec = Vec16<T>::kVec;
  const size_t begin = min(count, static_cast<size_t>(blockIdx.x) * chunk);
  const size_t n = min(count, begin + chunk) - begin;
  const size_t slot_offset = StageAndExchange<T, kRanks, kVec16>(peers, in + begin, n);

  const T* slots[kRanks];
  SlotsAt<T, kRanks>(peers, slot_offset, slots);
  T* dst = out + begin;
  const size_t n_vec = kVec16 ? n / kVec : 0;
  if constexpr (kVec16) {
    for (size_t v = threadIdx.x; v < n_vec; v += kOneShotThreads)
      StoreVec(dst + v * kVec, SumVec<T, kRanks>(slots, v));
  }
  for (size_t i = n_vec * kVec + threadIdx.x; i < n; i += kOneShotThreads)
    dst[i] = SumScalar<T, kRanks>(slots, i);
}

// The fused epilogue: block b owns rows [b * rows_per_block, ...) of `delta` (rows x dim), stages
// them like the plain kernel, then per row: d = sum over ranks (rounded to T, as the plain
// all-reduce), residual = T(residual + d), and the norm's second half from FinishRmsNormRow (the
// norm kernel's own code), so fused and unfused results agree up to the order of the sum of
// squares.
template <typename T, int kRanks, bool kVec16>
__global__ void __launch_bounds__(kOneShotThreads)
    OneShotAllReduceAddRmsNormKernel(const OneShotPeers peers, const T* delta, T* residual, const T* weight,
                                     T* out, int64_t rows, int64_t dim, int64_t rows_per_block, float eps) {
  static_assert(kRanks >= 2 && kRanks <= kOneShotMaxRanks);
  constexpr int kVec = Vec16<T>::kVec;
  __shared__ float scratch[32];
  const int64_t row_begin = min(rows, static_cast<int64_t>(blockIdx.x) * rows_per_block);
  const int64_t row_end = min(rows, row_begin + rows_per_block);
  const size_t slot_offset = StageAndExchange<T, kRanks, kVec16>(
      peers, delta + row_begin * dim, static_cast<size_t>((row_end - row_begin) * dim));

  const T* slots[kRanks];
  SlotsAt<T, kRanks>(peers, slot_offset, slots);
  for (int64_t row = row_begin; row < row_end; ++row) {
    const size_t staged = static_cast<size_t>((row - row_begin) * dim);
    T* res = residual + row * dim;
    const float sum_sq = AddToRowSumSquares<T, kVec16>(res, dim, [&](int64_t c) {
      if constexpr (kVec16) {
        return SumVec<T, kRanks>(slots, staged / kVec + c);
      } else {
        return SumScalar<T, kRanks>(slots, staged + c);
      }
    });
    FinishRmsNormRow<T, kVec16>(res, weight, out + row * dim, dim, sum_sq, eps, scratch);
  }
}

template <typename T>
cudaError_t LaunchTyped(const OneShotPeers& peers, const void* in, void* out, size_t count,
                        cudaStream_t stream) {
  constexpr size_t kVec = Vec16<T>::kVec;
  const size_t per_block = (count + peers.layout.blocks - 1) / peers.layout.blocks;
  const size_t chunk = (per_block + kVec - 1) / kVec * kVec;
  const bool vec = Aligned16(in) && Aligned16(out);
  return DispatchRanks(peers.world_size, [&](auto ranks) {
    constexpr int kRanks = decltype(ranks)::value;
    auto kernel = vec ? OneShotAllReduceKernel<T, kRanks, true> : OneShotAllReduceKernel<T, kRanks, false>;
    return LaunchKernel(kernel, dim3(peers.layout.blocks), dim3(kOneShotThreads), 0, stream, /*pdl=*/true,
                        peers, static_cast<const T*>(in), static_cast<T*>(out), count, chunk);
  });
}

int64_t RowsPerBlock(const OneShotLayout& layout, size_t rows) {
  return static_cast<int64_t>((rows + layout.blocks - 1) / layout.blocks);
}

absl::Status CheckPeers(const OneShotPeers& peers) {
  RETURN_IF_ERROR(peer::CheckPeerRegions("OneShotAllReduce", peers.regions, peers.world_size, kOneShotMaxRanks,
                                         peers.rank, peers.timeout_ns));
  if (peers.layout.blocks < 1 || peers.layout.blocks > kOneShotMaxBlocks || peers.layout.slot_bytes == 0 ||
      peers.layout.slot_bytes % 16 != 0) {
    return absl::InvalidArgumentError("OneShotAllReduce: malformed layout");
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<OneShotLayout> MakeOneShotLayout(size_t capacity_bytes, int blocks) {
  if (blocks < 1 || blocks > kOneShotMaxBlocks) {
    return absl::InvalidArgumentError(
        absl::StrCat("OneShotAllReduce: ", blocks, " blocks outside [1, ", kOneShotMaxBlocks, "]"));
  }
  OneShotLayout layout;
  layout.blocks = blocks;
  layout.slot_bytes = capacity_bytes / blocks / 16 * 16;
  if (layout.slot_bytes == 0) {
    return absl::InvalidArgumentError(absl::StrCat("OneShotAllReduce: capacity of ", capacity_bytes,
                                                   " bytes below 16 bytes per block (", blocks, " blocks)"));
  }
  return layout;
}

bool OneShotFits(const OneShotLayout& layout, DType dtype, size_t count) {
  if (!peer::PeerReducible(dtype)) return false;
  // Chunks are ceil(count / blocks) elements rounded up to 16 bytes; slot_bytes is a multiple of
  // 16, so that fits a slot exactly when the byte size fits blocks * slot_bytes.
  return count <= layout.capacity_bytes() / DTypeSize(dtype);
}

absl::Status LaunchOneShotAllReduce(const OneShotPeers& peers, DType dtype, const void* in, void* out,
                                    size_t count, Stream stream) {
  RETURN_IF_ERROR(CheckPeers(peers));
  if (count == 0) return absl::OkStatus();  // every rank skips alike: the epochs stay in step
  if (in == nullptr || out == nullptr) return absl::InvalidArgumentError("OneShotAllReduce: null buffer");
  if (!OneShotFits(peers.layout, dtype, count)) {
    return absl::InvalidArgumentError(absl::StrCat("OneShotAllReduce: ", count, " elements of ",
                                                   std::string(DTypeName(dtype)), " do not fit ",
                                                   peers.layout.capacity_bytes(), " staging bytes"));
  }
  return LLM_DISPATCH_FLOAT(dtype, "OneShotAllReduce", [&] {
    CUDA_RETURN_IF_ERROR(LaunchTyped<scalar_t>(peers, in, out, count, stream));
    return absl::OkStatus();
  });
}

bool OneShotFitsRows(const OneShotLayout& layout, DType dtype, size_t rows, size_t dim) {
  if (!peer::PeerReducible(dtype)) return false;
  if (rows == 0 || dim == 0 || layout.blocks < 1) return false;
  return static_cast<size_t>(RowsPerBlock(layout, rows)) * dim * DTypeSize(dtype) <= layout.slot_bytes;
}

absl::Status LaunchOneShotAllReduceAddRmsNorm(const OneShotPeers& peers, DType dtype, const void* delta,
                                              void* residual, const void* weight, float eps, void* out,
                                              size_t rows, size_t dim, Stream stream) {
  RETURN_IF_ERROR(CheckPeers(peers));
  if (rows == 0) return absl::OkStatus();  // every rank skips alike: the epochs stay in step
  if (delta == nullptr || residual == nullptr || weight == nullptr || out == nullptr)
    return absl::InvalidArgumentError("OneShotAllReduceAddRmsNorm: null buffer");
  if (!OneShotFitsRows(peers.layout, dtype, rows, dim)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "OneShotAllReduceAddRmsNorm: ", rows, " rows of ", dim, " ", std::string(DTypeName(dtype)),
        " do not fit ", peers.layout.blocks, " staging slots of ", peers.layout.slot_bytes, " bytes"));
  }
  if (rows > 0x7fffffff || dim > 0x7fffffff)
    return absl::InvalidArgumentError("OneShotAllReduceAddRmsNorm: too many rows or columns");
  return LLM_DISPATCH_FLOAT(dtype, "OneShotAllReduceAddRmsNorm", [&] {
    using T = scalar_t;
    constexpr size_t kVec = Vec16<T>::kVec;
    // The vector path needs every row start aligned: dim a multiple of the vector and 16-byte
    // aligned buffers. Either path follows the same protocol, so ranks may differ in it.
    const bool vec =
        dim % kVec == 0 && Aligned16(delta) && Aligned16(residual) && Aligned16(weight) && Aligned16(out);
    const int64_t rows_per_block = RowsPerBlock(peers.layout, rows);
    const cudaError_t err = DispatchRanks(peers.world_size, [&](auto ranks) {
      constexpr int kRanks = decltype(ranks)::value;
      auto kernel = vec ? OneShotAllReduceAddRmsNormKernel<T, kRanks, true>
                        : OneShotAllReduceAddRmsNormKernel<T, kRanks, false>;
      return LaunchKernel(kernel, dim3(peers.layout.blocks), dim3(kOneShotThreads), 0, stream, /*pdl=*/true,
                          peers, static_cast<const T*>(delta), static_cast<T*>(residual),
                          static_cast<const T*>(weight), static_cast<T*>(out), static_cast<int64_t>(rows),
                          static_cast<int64_t>(dim), rows_per_block, eps);
    });
    CUDA_RETURN_IF_ERROR(err);
    return absl::OkStatus();
  });
}

}  // namespace llm::cuda
