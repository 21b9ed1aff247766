// Device-side helpers shared by the kernels: element types and their float conversions,
// 16-byte vectors, warp/block reductions, programmatic dependent launch (PDL) and the one dtype
// dispatch macro every launcher uses.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "kernels/core/dtype.h"

namespace llm::cuda {

// --- element conversions (float accumulation everywhere) ---
__device__ __forceinline__ float ToFloat(float x) { return x; }
__device__ __forceinline__ float ToFloat(__half x) { return __half2float(x); }
__device__ __forceinline__ float ToFloat(__nv_bfloat16 x) { return __bfloat162float(x); }

template <typename T>
__device__ __forceinline__ T FromFloat(float x);
template <>
__device__ __forceinline__ float FromFloat<float>(float x) { return x; }
template <>
__device__ __forceinline__ __half FromFloat<__half>(float x) { return __float2half_rn(x); }
template <>
__device__ __forceinline__ __nv_bfloat16 FromFloat<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }

// The device's nanosecond clock (%globaltimer), comparable across SMs: for kernels that report
// where their time goes.
__device__ __forceinline__ unsigned long long GlobalTimerNs() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// SiLU of a value whose product with `up` is stored as T, as every kernel that applies it
// computes it (the SiLU-and-mul kernels and the GEMVs' gate/up epilogues must round alike: their
// outputs are compared bit for bit). For 16-bit T, e^-g on the SFU and a fast division (__expf,
// __fdividef: relative error ~1e-6, under the 2^-9 / 2^-12 of the bf16 / fp16 rounding that
// follows): the exact form (expf's range reduction and an IEEE division, ~20 instructions an
// element) made the FP8 prefill's SiLU-and-mul bound by instruction issue rather than by its bytes.
// Float32 keeps the exact form (the float32 engine is held to ~1e-6 of the references).
template <typename T>
__device__ __forceinline__ float SiluFor(float g) {
  if constexpr (sizeof(T) == 2) {
    return __fdividef(g, 1.0f + __expf(-g));
  } else {
    return g / (1.0f + expf(-g));
  }
}

// A 16-byte vector of T: kVec elements moved with one load/store.
template <typename T>
struct alignas(16) Vec16 {
  static constexpr int kVec = 16 / sizeof(T);
  T v[kVec];
};

template <typename T>
__device__ __forceinline__ Vec16<T> LoadVec(const T* p) {
  Vec16<T> r;
  *reinterpret_cast<uint4*>(&r) = *reinterpret_cast<const uint4*>(p);
  return r;
}
template <typename T>
__device__ __forceinline__ void StoreVec(T* p, const Vec16<T>& v) {
  *reinterpret_cast<uint4*>(p) = *reinterpret_cast<const uint4*>(&v);
}
// Streaming load of 16 bytes that skips L1 (weights read once per step).
__device__ __forceinline__ uint4 LoadU4Streaming(const void* p) {
  uint4 u;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(u.x), "=r"(u.y), "=r"(u.z), "=r"(u.w)
               : "l"(p));
  return u;
}
// The same load into a Vec16 (its own statement: routed through LoadU4Streaming, the 16-bit GEMV's
// PTX changed).
template <typename T>
__device__ __forceinline__ Vec16<T> LoadVecStreaming(const T* p) {
  uint4 u;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(u.x), "=r"(u.y), "=r"(u.z), "=r"(u.w)
               : "l"(p));
  Vec16<T> r;
  *reinterpret_cast<uint4*>(&r) = u;
  return r;
}
// LoadU4Streaming with an L2 prefetch of the surrounding 256 bytes, for a warp whose 16-byte loads
// cover contiguous runs of 512 bytes or more (the int4 GEMV's codes).
__device__ __forceinline__ uint4 LoadU4StreamingL2Prefetch256(const void* p) {
  uint4 u;
  asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(u.x), "=r"(u.y), "=r"(u.z), "=r"(u.w)
               : "l"(p));
  return u;
}

inline bool Aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }
inline bool Aligned8(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 7) == 0; }

// --- reductions ---
__device__ __forceinline__ float WarpSum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float WarpMax(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
// Sum over the block; `scratch` holds 32 floats. Deterministic (fixed order). All threads get it.
__device__ __forceinline__ float BlockSum(float v, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
  v = WarpSum(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < warps ? scratch[lane] : 0.0f;
  return WarpSum(v);
}
__device__ __forceinline__ float BlockMax(float v, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
  v = WarpMax(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < warps ? scratch[lane] : -INFINITY;
  return WarpMax(v);
}

// --- programmatic dependent launch (sm_90) ---
// A kernel launched with the PDL attribute may start while its predecessor still runs: it must
// call GridDependencyWait() before reading anything the predecessor writes (or writing anything
// it reads). Every kernel calls AllowDependentLaunch() early so that its successor can start
// its independent prologue (weight loads) during this kernel's tail.
__device__ __forceinline__ void GridDependencyWait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ void AllowDependentLaunch() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;");
#endif
}

inline int CeilDiv(int64_t a, int64_t b) { return static_cast<int>((a + b - 1) / b); }

}  // namespace llm::cuda

// Dispatches a floating DType to a type alias `scalar_t` once per launch; unsupported dtypes
// return InvalidArgument naming the op.
#define LLM_DISPATCH_FLOAT(dtype, op_name, ...)                                                         \
  [&]() -> ::absl::Status {                                                                           \
    switch (dtype) {                                                                                  \
      case ::llm::DType::kF32: { using scalar_t = float; return __VA_ARGS__(); }                      \
      case ::llm::DType::kF16: { using scalar_t = __half; return __VA_ARGS__(); }                     \
      case ::llm::DType::kBF16: { using scalar_t = __nv_bfloat16; return __VA_ARGS__(); }             \
      default:                                                                                        \
        return ::absl::InvalidArgumentError(::absl::StrCat(op_name, ": unsupported dtype ",            \
                                                           std::string(::llm::DTypeName(dtype))));     \
    }                                                                                                 \
  }()

namespace llm::cuda {

// cudaLaunchKernelEx with programmatic stream serialization when `pdl` (see GridDependencyWait).
template <typename... KArgs, typename... Args>
cudaError_t LaunchKernel(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                         bool pdl, Args... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = pdl ? 1 : 0;
  return cudaLaunchKernelEx(&cfg, kernel, static_cast<KArgs>(args)...);
}

}  // namespace llm::cuda
