#include <type_traits>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/comm/peer_memory.cuh"
#include "kernels/cuda/comm/push_all_reduce.h"
#include "kernels/cuda/common/cuda_status.h"
#include "kernels/cuda/common/device_utils.cuh"
#include "kernels/cuda/norm/rms_norm_row.cuh"

namespace llm::cuda {
namespace {

using peer::RegionOf;

// --- the all-ones "nothing arrived" pattern, per element of 2 or 4 bytes ---
template <typename T>
using BitsOf = std::conditional_t<sizeof(T) == 2, uint16_t, uint32_t>;

// What is sent for an element: itself, unless it is all-ones (a NaN); then the same NaN with the
// sign bit clear.
template <typename T>
__device__ __forceinline__ BitsOf<T> SentForm(BitsOf<T> b) {
  constexpr BitsOf<T> kOnes = static_cast<BitsOf<T>>(~BitsOf<T>{0});
  return b == kOnes ? static_cast<BitsOf<T>>(kOnes >> 1) : b;
}
template <typename T>
__device__ __forceinline__ uint4 SentForm(uint4 u) {
  uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    if constexpr (sizeof(T) == 2) {
      // Per 16-bit half: 0xffff -> 0x7fff (clear bit 15 of each all-ones half).
      const uint32_t ones = __vcmpeq2(w[i], 0xffffffffu);  // 0xffff in every all-ones half
      w[i] &= ~(ones & 0x80008000u);
    } else {
      w[i] = SentForm<T>(w[i]);
    }
  }
  return make_uint4(w[0], w[1], w[2], w[3]);
}
// True when no element of the vector is all-ones (every element has arrived).
template <typename T>
__device__ __forceinline__ bool Arrived(uint4 u) {
  if constexpr (sizeof(T) == 2) {
    return (__vcmpeq2(u.x, 0xffffffffu) | __vcmpeq2(u.y, 0xffffffffu) | __vcmpeq2(u.z, 0xffffffffu) |
            __vcmpeq2(u.w, 0xffffffffu)) == 0;
  } else {
    return u.x != 0xffffffffu && u.y != 0xffffffffu && u.z != 0xffffffffu && u.w != 0xffffffffu;
  }
}

template <typename T>
__device__ __forceinline__ BitsOf<T> LoadBits(const T* p) {
  return *reinterpret_cast<const BitsOf<T>*>(p);
}
template <typename T>
__device__ __forceinline__ BitsOf<T> LoadVolatileElem(const void* p) {
  if constexpr (sizeof(T) == 2)
    return peer::LoadVolatile16Bit(p);
  else
    return peer::LoadVolatile32(p);
}
template <typename T>
__device__ __forceinline__ void StoreVolatileElem(void* p, BitsOf<T> b) {
  if constexpr (sizeof(T) == 2)
    peer::StoreVolatile16Bit(p, b);
  else
    peer::StoreVolatile32(p, b);
}
template <typename T>
__device__ __forceinline__ T FromBits(BitsOf<T> b) {
  T t;
  memcpy(&t, &b, sizeof(T));
  return t;
}

// The per-call state of one block.
struct Call {
  char* own;       // this rank's region
  int phase;       // 0..2
  uint64_t count;  // calls made by this block before this one (for the timeout report)
};

// Reads and bumps this block's counter; every thread of the block gets the call. After
// GridDependencyWait: the previous call's blocks are done with their counters.
template <int kRanks>
__device__ __forceinline__ Call BeginCall(const PushPeers& peers) {
  __shared__ uint64_t count_shared;
  char* own = RegionOf<kRanks>(peers.regions, peers.rank);
  if (threadIdx.x == 0) {
    uint64_t* counter = reinterpret_cast<uint64_t*>(own + peers.layout.counter_offset()) + blockIdx.x;
    const uint64_t c = *counter;
    *counter = c + 1;
    count_shared = c;
  }
  __syncthreads();
  const uint64_t c = count_shared;
  return Call{own, static_cast<int>(c % kPushPhases), c};
}

// Step 1 for elements [begin, begin + n) of `in` (the whole call's input): into every peer's
// recv[phase][rank] at the same element offsets.
template <typename T, int kRanks, bool kVec16>
__device__ __forceinline__ void Push(const PushPeers& peers, const Call& call, const T* in, size_t begin,
                                     size_t n) {
  constexpr int kVec = Vec16<T>::kVec;
  const size_t recv = peers.layout.recv_offset(call.phase, peers.rank) + begin * sizeof(T);
  const size_t n_vec = kVec16 ? n / kVec : 0;
  if constexpr (kVec16) {
    for (size_t v = threadIdx.x; v < n_vec; v += kPushThreads) {
      const uint4 u = SentForm<T>(*reinterpret_cast<const uint4*>(in + begin + v * kVec));
#pragma unroll
      for (int r = 0; r < kRanks; ++r) {
        if (r != peers.rank) peer::StoreVolatile16(RegionOf<kRanks>(peers.regions, r) + recv + v * 16, u);
      }
    }
  }
  for (size_t i = n_vec * kVec + threadIdx.x; i < n; i += kPushThreads) {
    const BitsOf<T> b = SentForm<T>(LoadBits(in + begin + i));
#pragma unroll
    for (int r = 0; r < kRanks; ++r) {
      if (r != peers.rank) StoreVolatileElem<T>(RegionOf<kRanks>(peers.regions, r) + recv + i * sizeof(T), b);
    }
  }
}

__device__ __forceinline__ void TimedOut(const PushPeers& peers, const Call& call, int src) {
  peer::ReportTimeoutAndTrap("push all-reduce", peers.rank, src, call.count, peers.timeout_ns);
}

// Steps 2 + 3 for the 16-byte vector at element offset `e`: polls every peer's copy, resets it,
// and returns the sum in rank order (own input `mine`, sent-form, in its place).
template <typename T, int kRanks>
__device__ __forceinline__ Vec16<T> GatherVec(const PushPeers& peers, const Call& call, const T* mine,
                                              size_t e) {
  constexpr int kVec = Vec16<T>::kVec;
  uint4 parts[kRanks];
#pragma unroll
  for (int r = 0; r < kRanks; ++r) {
    if (r == peers.rank) {
      parts[r] = SentForm<T>(*reinterpret_cast<const uint4*>(mine));
      continue;
    }
    char* p = call.own + peers.layout.recv_offset(call.phase, r) + e * sizeof(T);
    uint4 u = peer::LoadVolatile16(p);
    if (!Arrived<T>(u)) {
      const uint64_t start = peer::GlobalTimerNs();
      do {
        u = peer::LoadVolatile16(p);
        if (peer::GlobalTimerNs() - start > peers.timeout_ns) TimedOut(peers, call, r);
      } while (!Arrived<T>(u));
    }
    parts[r] = u;
    peer::StoreVolatile16(p, make_uint4(~0u, ~0u, ~0u, ~0u));
  }
  float acc[kVec];
#pragma unroll
  for (int r = 0; r < kRanks; ++r) {
    const Vec16<T>& x = *reinterpret_cast<const Vec16<T>*>(&parts[r]);
#pragma unroll
    for (int i = 0; i < kVec; ++i) acc[i] = r == 0 ? ToFloat(x.v[i]) : acc[i] + ToFloat(x.v[i]);
  }
  Vec16<T> out;
#pragma unroll
  for (int i = 0; i < kVec; ++i) out.v[i] = FromFloat<T>(acc[i]);
  return out;
}

// The same for one element.
template <typename T, int kRanks>
__device__ __forceinline__ T GatherElem(const PushPeers& peers, const Call& call, const T* mine, size_t e) {
  float acc = 0.0f;
#pragma unroll
  for (int r = 0; r < kRanks; ++r) {
    BitsOf<T> b;
    if (r == peers.rank) {
      b = SentForm<T>(LoadBits(mine));
    } else {
      char* p = call.own + peers.layout.recv_offset(call.phase, r) + e * sizeof(T);
      b = LoadVolatileElem<T>(p);
      constexpr BitsOf<T> kOnes = static_cast<BitsOf<T>>(~BitsOf<T>{0});
      if (b == kOnes) {
        const uint64_t start = peer::GlobalTimerNs();
        do {
          b = LoadVolatileElem<T>(p);
          if (peer::GlobalTimerNs() - start > peers.timeout_ns) TimedOut(peers, call, r);
        } while (b == kOnes);
      }
      StoreVolatileElem<T>(p, kOnes);
    }
    const float x = ToFloat(FromBits<T>(b));
    acc = r == 0 ? x : acc + x;
  }
  return FromFloat<T>(acc);
}

// Grid: layout.blocks blocks; block b reduces elements [b * chunk, min((b + 1) * chunk, count)),
// chunk a multiple of Vec16<T>::kVec.
template <typename T, int kRanks, bool kVec16>
__global__ void __launch_bounds__(kPushThreads)
    PushAllReduceKernel(const PushPeers peers, const T* in, T* out, size_t count, size_t chunk) {
  constexpr int kVec = Vec16<T>::kVec;
  AllowDependentLaunch();
  GridDependencyWait();
  const Call call = BeginCall<kRanks>(peers);
  const size_t begin = min(count, static_cast<size_t>(blockIdx.x) * chunk);
  const size_t n = min(count, begin + chunk) - begin;
  Push<T, kRanks, kVec16>(peers, call, in, begin, n);
  // Each thread gathers exactly the elements it pushed, so in place (out == in) is safe.
  const size_t n_vec = kVec16 ? n / kVec : 0;
  if constexpr (kVec16) {
    for (size_t v = threadIdx.x; v < n_vec; v += kPushThreads) {
      const size_t e = begin + v * kVec;
      StoreVec(out + e, GatherVec<T, kRanks>(peers, call, in + e, e));
    }
  }
  for (size_t i = n_vec * kVec + threadIdx.x; i < n; i += kPushThreads) {
    const size_t e = begin + i;
    out[e] = GatherElem<T, kRanks>(peers, call, in + e, e);
  }
}

// Grid: layout.blocks blocks. Block b pushes element chunk b of the whole rows x dim delta (as the
// plain kernel: every block sends a small share, so a row's data leaves from many SMs at once),
// then gathers and normalizes rows [b * rows_per_block, ...) (the other blocks' chunks of them
// arrive through the same receive buffers).
template <typename T, int kRanks, bool kVec16>
__global__ void __launch_bounds__(kPushThreads)
    PushAllReduceAddRmsNormKernel(const PushPeers peers, const T* delta, T* residual, const T* weight, T* out,
                                  int64_t rows, int64_t dim, int64_t rows_per_block, size_t chunk,
                                  float eps) {
  constexpr int kVec = Vec16<T>::kVec;
  __shared__ float scratch[32];
  AllowDependentLaunch();
  GridDependencyWait();
  const Call call = BeginCall<kRanks>(peers);
  const size_t count = static_cast<size_t>(rows * dim);
  const size_t begin = min(count, static_cast<size_t>(blockIdx.x) * chunk);
  Push<T, kRanks, kVec16>(peers, call, delta, begin, min(count, begin + chunk) - begin);
  const int64_t row_begin = min(rows, static_cast<int64_t>(blockIdx.x) * rows_per_block);
  const int64_t row_end = min(rows, row_begin + rows_per_block);
  for (int64_t row = row_begin; row < row_end; ++row) {
    T* res = residual + row * dim;
    const size_t row_start = static_cast<size_t>(row * dim);
    const float sum_sq = AddToRowSumSquares<T, kVec16>(res, dim, [&](int64_t c) {
      if constexpr (kVec16) {
        const size_t e = row_start + c * kVec;
        return GatherVec<T, kRanks>(peers, call, delta + e, e);
      } else {
        const size_t e = row_start + c;
        return GatherElem<T, kRanks>(peers, call, delta + e, e);
      }
    });
    FinishRmsNormRow<T, kVec16>(res, weight, out + row * dim, dim, sum_sq, eps, scratch);
  }
}

absl::Status CheckPeers(const PushPeers& peers) {
  const PushLayout& l = peers.layout;
  RETURN_IF_ERROR(
      peer::CheckPeerRegions("PushAllReduce", peers.regions, l.world_size, kPushMaxRanks, peers.rank, peers.timeout_ns));
  if (l.blocks < 1 || l.blocks > kPushMaxBlocks || l.capacity_bytes == 0 || l.capacity_bytes % 16 != 0)
    return absl::InvalidArgumentError("PushAllReduce: malformed layout");
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<PushLayout> MakePushLayout(size_t capacity_bytes, int blocks, int world_size) {
  if (blocks < 1 || blocks > kPushMaxBlocks)
    return absl::InvalidArgumentError(
        absl::StrCat("PushAllReduce: ", blocks, " blocks outside [1, ", kPushMaxBlocks, "]"));
  if (world_size < 2 || world_size > kPushMaxRanks)
    return absl::InvalidArgumentError(
        absl::StrCat("PushAllReduce: world size ", world_size, " outside [2, ", kPushMaxRanks, "]"));
  PushLayout layout;
  layout.blocks = blocks;
  layout.world_size = world_size;
  layout.capacity_bytes = capacity_bytes / 16 * 16;
  if (layout.capacity_bytes == 0)
    return absl::InvalidArgumentError(absl::StrCat("PushAllReduce: capacity of ", capacity_bytes, " bytes"));
  return layout;
}

absl::Status InitPushRegion(void* region, const PushLayout& layout) {
  if (region == nullptr) return absl::InvalidArgumentError("InitPushRegion: null region");
  CUDA_RETURN_IF_ERROR(cudaMemset(region, 0xff, layout.recv_bytes()));
  CUDA_RETURN_IF_ERROR(cudaMemset(static_cast<char*>(region) + layout.counter_offset(), 0,
                                  layout.region_bytes() - layout.counter_offset()));
  CUDA_RETURN_IF_ERROR(cudaDeviceSynchronize());
  return absl::OkStatus();
}

bool PushFits(const PushLayout& layout, DType dtype, size_t count) {
  return peer::PeerReducible(dtype) && count <= layout.capacity_bytes / DTypeSize(dtype);
}

absl::Status LaunchPushAllReduce(const PushPeers& peers, DType dtype, const void* in, void* out, size_t count,
                                 Stream stream) {
  RETURN_IF_ERROR(CheckPeers(peers));
  if (count == 0) return absl::OkStatus();  // every rank skips alike: the counters stay in step
  if (in == nullptr || out == nullptr) return absl::InvalidArgumentError("PushAllReduce: null buffer");
  if (!PushFits(peers.layout, dtype, count))
    return absl::InvalidArgumentError(absl::StrCat("PushAllReduce: ", count, " elements of ",
                                                   std::string(DTypeName(dtype)), " do not fit ",
                                                   peers.layout.capacity_bytes, " bytes"));
  return LLM_DISPATCH_FLOAT(dtype, "PushAllReduce", [&] {
    using T = scalar_t;
    constexpr size_t kVec = Vec16<T>::kVec;
    const size_t per_block = (count + peers.layout.blocks - 1) / peers.layout.blocks;
    const size_t chunk = (per_block + kVec - 1) / kVec * kVec;
    const bool vec = Aligned16(in) && Aligned16(out);
    const cudaError_t err = peer::DispatchRanks(peers.layout.world_size, [&](auto ranks) {
      constexpr int kRanks = decltype(ranks)::value;
      auto kernel = vec ? PushAllReduceKernel<T, kRanks, true> : PushAllReduceKernel<T, kRanks, false>;
      return LaunchKernel(kernel, dim3(peers.layout.blocks), dim3(kPushThreads), 0, stream, /*pdl=*/true,
                          peers, static_cast<const T*>(in), static_cast<T*>(out), count, chunk);
    });
    CUDA_RETURN_IF_ERROR(err);
    return absl::OkStatus();
  });
}

absl::Status LaunchPushAllReduceAddRmsNorm(const PushPeers& peers, DType dtype, const void* delta,
                                           void* residual, const void* weight, float eps, void* out,
                                           size_t rows, size_t dim, Stream stream) {
  RETURN_IF_ERROR(CheckPeers(peers));
  if (rows == 0) return absl::OkStatus();  // every rank skips alike
  if (delta == nullptr || residual == nullptr || weight == nullptr || out == nullptr)
    return absl::InvalidArgumentError("PushAllReduceAddRmsNorm: null buffer");
  if (dim == 0 || rows > 0x7fffffff || dim > 0x7fffffff || !PushFits(peers.layout, dtype, rows * dim))
    return absl::InvalidArgumentError(absl::StrCat("PushAllReduceAddRmsNorm: ", rows, " rows of ", dim, " ",
                                                   std::string(DTypeName(dtype)), " do not fit ",
                                                   peers.layout.capacity_bytes, " bytes"));
  return LLM_DISPATCH_FLOAT(dtype, "PushAllReduceAddRmsNorm", [&] {
    using T = scalar_t;
    constexpr size_t kVec = Vec16<T>::kVec;
    // The vector path needs every row start aligned; either path follows the same protocol.
    const bool vec =
        dim % kVec == 0 && Aligned16(delta) && Aligned16(residual) && Aligned16(weight) && Aligned16(out);
    const int64_t rows_per_block =
        static_cast<int64_t>((rows + peers.layout.blocks - 1) / peers.layout.blocks);
    const size_t per_block = (rows * dim + peers.layout.blocks - 1) / peers.layout.blocks;
    const size_t chunk = (per_block + kVec - 1) / kVec * kVec;
    const cudaError_t err = peer::DispatchRanks(peers.layout.world_size, [&](auto ranks) {
      constexpr int kRanks = decltype(ranks)::value;
      auto kernel = vec ? PushAllReduceAddRmsNormKernel<T, kRanks, true>
                        : PushAllReduceAddRmsNormKernel<T, kRanks, false>;
      return LaunchKernel(kernel, dim3(peers.layout.blocks), dim3(kPushThreads), 0, stream, /*pdl=*/true,
                          peers, static_cast<const T*>(delta), static_cast<T*>(residual),
                          static_cast<const T*>(weight), static_cast<T*>(out), static_cast<int64_t>(rows),
                          static_cast<int64_t>(dim), rows_per_block, chunk, eps);
    });
    CUDA_RETURN_IF_ERROR(err);
    return absl::OkStatus();
  });
}

}  // namespace llm::cuda
