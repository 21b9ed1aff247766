// Hopper bulk copies (cp.async.bulk: one thread moves a contiguous global range into shared
// memory on the copy engine, no registers held) and the shared-memory barriers (mbarrier) that
// signal their completion. Used where a kernel wants a deep prefetch it cannot afford in
// registers.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace llm::cuda {

__device__ __forceinline__ uint32_t SharedAddress(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// A barrier that completes a phase after `arrivals` arrivals and the bytes announced with them.
__device__ __forceinline__ void MbarrierInit(uint64_t* bar, uint32_t arrivals) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(SharedAddress(bar)), "r"(arrivals) : "memory");
#endif
}

// Makes barrier initializations visible to the copy engine (async proxy). Follow with a
// __syncthreads() before other threads use the barriers.
__device__ __forceinline__ void FenceMbarrierInit() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
#endif
}

// Orders this thread's (and, after a __syncwarp/__syncthreads, its peers') earlier shared-memory
// reads before a following bulk copy that overwrites the same bytes.
__device__ __forceinline__ void FenceProxyAsyncShared() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
#endif
}

// An L2 policy for data read once (weights in a decode step): evicted first, so that it does not
// push out what the step re-reads (activations, KV cache).
__device__ __forceinline__ uint64_t L2EvictFirstPolicy() {
  uint64_t policy = 0;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
#endif
  return policy;
}

// An L2 policy for data many blocks re-read (a GEMM's activations): kept in L2 first.
__device__ __forceinline__ uint64_t L2EvictLastPolicy() {
  uint64_t policy = 0;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(policy));
#endif
  return policy;
}

// One arrival announcing `bytes` that copies (BulkCopyToShared) will complete on `bar`.
__device__ __forceinline__ void MbarrierArriveExpectTx(uint64_t* bar, uint32_t bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(SharedAddress(bar)), "r"(bytes)
               : "memory");
#endif
}

// A copy of `bytes` (a multiple of 16; both addresses 16-byte aligned) from global `src` to
// shared `dst` that completes its bytes on `bar` without arriving (MbarrierArriveExpectTx did).
__device__ __forceinline__ void BulkCopyToShared(void* dst, const void* src, uint32_t bytes, uint64_t* bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                   SharedAddress(dst)),
               "l"(src), "r"(bytes), "r"(SharedAddress(bar))
               : "memory");
#endif
}

// The same with an L2 cache policy (L2EvictFirstPolicy for bytes read once).
__device__ __forceinline__ void BulkCopyToShared(void* dst, const void* src, uint32_t bytes, uint64_t* bar,
                                                 uint64_t l2_policy) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], %2, [%3], %4;" ::
          "r"(SharedAddress(dst)),
      "l"(src), "r"(bytes), "r"(SharedAddress(bar)), "l"(l2_policy)
      : "memory");
#endif
}

// One arrival that also announces `bytes` to come, then the copy of `bytes` (a multiple of 16;
// both addresses 16-byte aligned) from global `src` to shared `dst`, completing on `bar`.
__device__ __forceinline__ void BulkLoadToShared(void* dst, const void* src, uint32_t bytes, uint64_t* bar,
                                                 uint64_t l2_policy) {
  MbarrierArriveExpectTx(bar, bytes);
  BulkCopyToShared(dst, src, bytes, bar, l2_policy);
}

// One arrival on `bar` (no bytes announced): a consumer's release of a stage.
__device__ __forceinline__ void MbarrierArrive(uint64_t* bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(SharedAddress(bar)) : "memory");
#endif
}

// A tile of a 2-D tensor (TMA: the box and the shared-memory swizzle are the tensor map's; `map`
// the address of a __grid_constant__ CUtensorMap parameter) at element coordinates (inner, outer)
// into shared `dst`, completing its bytes on `bar` (announced by MbarrierArriveExpectTx). Parts
// of the box outside the tensor are filled with zeros. `l2_policy` as for BulkLoadToShared.
__device__ __forceinline__ void TensorTileToShared(void* dst, const void* map, int inner, int outer, uint64_t* bar,
                                                   uint64_t l2_policy) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint"
      " [%0], [%1, {%2, %3}], [%4], %5;" ::"r"(SharedAddress(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(inner), "r"(outer), "r"(SharedAddress(bar)), "l"(l2_policy)
      : "memory");
#endif
}

// Waits until the barrier's phase of parity `parity` (0 for the first phase, then alternating)
// has completed.
__device__ __forceinline__ void MbarrierWait(uint64_t* bar, uint32_t parity) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  const uint32_t addr = SharedAddress(bar);
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(addr), "r"(parity)
        : "memory");
  } while (!done);
#endif
}

}  // namespace llm::cuda
