// Internal: helpers shared by the NVLink all-reduce kernels (one_shot_all_reduce.cu,
// push_all_reduce.cu): system-scope flag accesses, loads and stores that bypass L1, the bounded
// spin, the dispatch over the rank count, and the launchers' common argument checks.
#pragma once

#include <cstdio>
#include <type_traits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "kernels/core/dtype.h"
#include "kernels/cuda/common/device_utils.cuh"

namespace llm::cuda::peer {

__device__ __forceinline__ void StoreReleaseSys(uint64_t* p, uint64_t v) {
  asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}
__device__ __forceinline__ uint64_t LoadAcquireSys(const uint64_t* p) {
  uint64_t v;
  asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ uint64_t GlobalTimerNs() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Peer data is read at L2 (the owner's, over NVLink): ld.global.cg never allocates in L1, so a
// line cached by an earlier call cannot be returned stale.
template <typename T>
__device__ __forceinline__ Vec16<T> LoadVecCg(const T* p) {
  const uint4 u = __ldcg(reinterpret_cast<const uint4*>(p));
  Vec16<T> r;
  *reinterpret_cast<uint4*>(&r) = u;
  return r;
}
template <typename T>
__device__ __forceinline__ T LoadCg(const T* p) {
  static_assert(sizeof(T) == 2 || sizeof(T) == 4);
  if constexpr (sizeof(T) == 2) {
    const unsigned short u = __ldcg(reinterpret_cast<const unsigned short*>(p));
    return *reinterpret_cast<const T*>(&u);
  } else {
    const unsigned int u = __ldcg(reinterpret_cast<const unsigned int*>(p));
    return *reinterpret_cast<const T*>(&u);
  }
}

// Volatile 16-byte and 2/4-byte accesses: every poll goes to memory (L2), and the compiler may
// neither merge nor drop the stores into a peer's buffer.
__device__ __forceinline__ uint4 LoadVolatile16(const void* p) {
  uint4 u;
  asm volatile("ld.volatile.global.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(u.x), "=r"(u.y), "=r"(u.z), "=r"(u.w)
               : "l"(p)
               : "memory");
  return u;
}
__device__ __forceinline__ void StoreVolatile16(void* p, uint4 u) {
  asm volatile("st.volatile.global.v4.u32 [%0], {%1,%2,%3,%4};" ::"l"(p), "r"(u.x), "r"(u.y), "r"(u.z),
               "r"(u.w)
               : "memory");
}
__device__ __forceinline__ uint32_t LoadVolatile32(const void* p) {
  uint32_t u;
  asm volatile("ld.volatile.global.u32 %0, [%1];" : "=r"(u) : "l"(p) : "memory");
  return u;
}
__device__ __forceinline__ void StoreVolatile32(void* p, uint32_t u) {
  asm volatile("st.volatile.global.u32 [%0], %1;" ::"l"(p), "r"(u) : "memory");
}
__device__ __forceinline__ uint16_t LoadVolatile16Bit(const void* p) {
  uint16_t u;
  asm volatile("ld.volatile.global.u16 %0, [%1];" : "=h"(u) : "l"(p) : "memory");
  return u;
}
__device__ __forceinline__ void StoreVolatile16Bit(void* p, uint16_t u) {
  asm volatile("st.volatile.global.u16 [%0], %1;" ::"l"(p), "h"(u) : "memory");
}

// The regions are indexed with compile-time ranks only (unrolled loops, selects): a runtime
// index into a kernel parameter array would copy the whole parameter struct to local memory.
template <int kRanks, int kMax>
__device__ __forceinline__ char* RegionOf(void* const (&regions)[kMax], int r) {
  char* region = nullptr;
#pragma unroll
  for (int i = 0; i < kRanks; ++i) {
    if (i == r) region = static_cast<char*>(regions[i]);
  }
  return region;
}

// Prints who waited for whom and traps: a peer that never arrives (crashed, or made a different
// sequence of calls) becomes a sticky CUDA error on the stream instead of a hang.
__device__ __forceinline__ void ReportTimeoutAndTrap(const char* what, int rank, int peer, uint64_t epoch,
                                                     uint64_t timeout_ns) {
  printf("%s: rank %d block %d waited over %llu ns for rank %d (call %llu); trapping\n", what, rank,
         static_cast<int>(blockIdx.x), static_cast<unsigned long long>(timeout_ns), peer,
         static_cast<unsigned long long>(epoch));
  __trap();
}

// --- host side: what both kernels' launchers check ---

// The dtypes the kernels sum (float32 accumulation).
inline bool PeerReducible(DType t) { return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16; }

// World size in [2, max_ranks], rank in range, a mapped 16-byte aligned region for every rank and
// a positive spin timeout; `what` names the kernel in the message.
inline absl::Status CheckPeerRegions(const char* what, void* const* regions, int world_size, int max_ranks, int rank,
                                     uint64_t timeout_ns) {
  if (world_size < 2 || world_size > max_ranks)
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": world size ", world_size, " outside [2, ", max_ranks, "]"));
  if (rank < 0 || rank >= world_size)
    return absl::InvalidArgumentError(absl::StrCat(what, ": rank ", rank, " out of range"));
  for (int r = 0; r < world_size; ++r) {
    if (regions[r] == nullptr || !Aligned16(regions[r]))
      return absl::InvalidArgumentError(absl::StrCat(what, ": region of rank ", r, " missing or unaligned"));
  }
  if (timeout_ns == 0) return absl::InvalidArgumentError(absl::StrCat(what, ": zero timeout"));
  return absl::OkStatus();
}

// Calls launch(std::integral_constant<int, world_size>) for world sizes 2..8: the kernels take
// the rank count as a template argument (see RegionOf).
template <typename Launch>
cudaError_t DispatchRanks(int world_size, Launch&& launch) {
  switch (world_size) {
    case 2:
      return launch(std::integral_constant<int, 2>());
    case 3:
      return launch(std::integral_constant<int, 3>());
    case 4:
      return launch(std::integral_constant<int, 4>());
    case 5:
      return launch(std::integral_constant<int, 5>());
    case 6:
      return launch(std::integral_constant<int, 6>());
    case 7:
      return launch(std::integral_constant<int, 7>());
    case 8:
      return launch(std::integral_constant<int, 8>());
  }
  return cudaErrorInvalidValue;  // excluded by the callers' checks
}

}  // namespace llm::cuda::peer
