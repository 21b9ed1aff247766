// Hopper's warpgroup MMA (wgmma.mma_async): four warps issue one MMA of 64 rows together, both
// operands read from shared memory through 64-bit matrix descriptors, the accumulators in the
// warps' registers. The asynchronous form needs its fences: WgmmaFence before MMAs that read
// registers written since, WgmmaCommit after issuing them, WgmmaWait before reading the sums (or
// before the operands' shared memory is reused).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace llm::cuda {

// The descriptor of a K-major operand tile stored with the 128-byte swizzle (rows of 128 bytes,
// 16-byte chunks XOR-permuted by row % 8, as a TMA load with CU_TENSOR_MAP_SWIZZLE_128B leaves
// them; the tile 1024-byte aligned): 8-row groups 1024 bytes apart. An MMA's K slice that starts
// `bytes` into the rows takes the descriptor of address + bytes (the swizzle applies to the
// address bits, so the slice need not be 128-byte aligned).
__device__ __forceinline__ uint64_t WgmmaDescSwizzle128(uint32_t shared_address) {
  uint64_t d = (shared_address & 0x3FFFF) >> 4;  // start address
  d |= uint64_t{1} << 16;                        // leading byte offset (unused with this swizzle): 16 bytes
  d |= uint64_t{1024 >> 4} << 32;                // stride byte offset: 8 rows of 128 bytes
  d |= uint64_t{1} << 62;                        // 128-byte swizzle
  return d;
}

// The descriptor of an MN-major 16-bit operand tile (rows along K, each row 64 consecutive M or N
// elements: 128 bytes, 16-byte chunks XOR-permuted by row % 8; 1024-byte aligned): 8-row groups of
// K 1024 bytes apart, and the next 64 elements of M or N `mn_block_bytes` further on. For a B
// operand that is stored [K][N] (N contiguous), read with the MMA's transposed-B form.
__device__ __forceinline__ uint64_t WgmmaDescSwizzle128MnMajor(uint32_t shared_address,
                                                               uint32_t mn_block_bytes) {
  uint64_t d = (shared_address & 0x3FFFF) >> 4;         // start address
  d |= uint64_t{(mn_block_bytes >> 4) & 0x3FFF} << 16;  // leading byte offset: the next 64 of M or N
  d |= uint64_t{1024 >> 4} << 32;                       // stride byte offset: 8 rows of K
  d |= uint64_t{1} << 62;                               // 128-byte swizzle
  return d;
}

__device__ __forceinline__ void WgmmaFence() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
#endif
}
__device__ __forceinline__ void WgmmaCommit() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
#endif
}
// Waits until at most `kPending` committed groups are still running.
template <int kPending>
__device__ __forceinline__ void WgmmaWait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(kPending) : "memory");
#endif
}
// Keeps the compiler from moving reads or writes of an accumulator across the asynchronous MMAs.
template <int kRegs>
__device__ __forceinline__ void WgmmaFenceOperands(float (&d)[kRegs]) {
#pragma unroll
  for (int i = 0; i < kRegs; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

template <int kRegs>
__device__ __forceinline__ void WgmmaFenceOperands(uint32_t (&r)[kRegs]) {
#pragma unroll
  for (int i = 0; i < kRegs; ++i) asm volatile("" : "+r"(r[i])::"memory");
}

// d[64 x kN] = A[64 x 32] · B[kN x 32]ᵀ (+ d if `accumulate`), A and B E4M3 (K-major descriptors),
// d float32 (Hopper keeps fewer bits than float32 while it sums E4M3 products: callers add a
// few MMAs' sums into float32 totals themselves, as cuBLASLt does unless told to be fast): a thread
// holds kN / 2 sums, d[4 j + e] at row 16 (warp % 4) + lane / 4 + 8 (e / 2), column 8 j + 2 (lane % 4)
// + e % 2.
template <int kN>
struct WgmmaFp8;

template <>
struct WgmmaFp8<16> {
  static __device__ __forceinline__ void Run(float (&d)[8], uint64_t a, uint64_t b, bool accumulate) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile(
        "{\n"
        ".reg .pred p;\n"
        "setp.ne.b32 p, %10, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n16k32.f32.e4m3.e4m3 "
        "{%0, %1, %2, %3, %4, %5, %6, %7}, %8, %9, p, 1, 1;\n"
        "}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
        : "l"(a), "l"(b), "r"(static_cast<int>(accumulate)));
#endif
  }
};

template <>
struct WgmmaFp8<32> {
  static __device__ __forceinline__ void Run(float (&d)[16], uint64_t a, uint64_t b, bool accumulate) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile(
        "{\n"
        ".reg .pred p;\n"
        "setp.ne.b32 p, %18, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n32k32.f32.e4m3.e4m3 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, %16, %17, p, 1, 1;\n"
        "}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
        : "l"(a), "l"(b), "r"(static_cast<int>(accumulate)));
#endif
  }
};

template <>
struct WgmmaFp8<64> {
  static __device__ __forceinline__ void Run(float (&d)[32], uint64_t a, uint64_t b, bool accumulate) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile(
        "{\n"
        ".reg .pred p;\n"
        "setp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, "
        "%21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1;\n"
        "}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]),
          "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]),
          "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]),
          "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "l"(a), "l"(b), "r"(static_cast<int>(accumulate)));
#endif
  }
};

// d[64 x kN] = A[64 x 16] · B[kN x 16]ᵀ (+ d if `accumulate`), A from registers, B bf16 (kType
// kBF16) or fp16 through a K-major descriptor (kTransB: an MN-major one, B stored [K][N], N
// contiguous: WgmmaDescSwizzle128MnMajor, read by the MMA's transposed-B form), d float32. A warp holds rows 16 (warp % 4) .. + 15
// of A as mma.m16n8k16 holds its A fragment: a[0] row lane / 4, K (2 (lane % 4), + 1); a[1] row
// + 8; a[2] and a[3] the same rows at K + 8. A's registers are read asynchronously: they must keep
// their values until WgmmaWait says the MMA is done (callers fence them with WgmmaFenceOperands
// after the wait). d as WgmmaFp8's.
enum class WgmmaRsType { kBF16, kF16 };
template <WgmmaRsType kType, int kN, bool kTransB = false>
struct WgmmaRs;

// The PTX type must be a literal in the asm string, so each N's statement is written once here and
// expanded per type (TYPE: bf16 or f16) by the specialization for that N.
#define LLM_WGMMA_RS32_ASM(TYPE)                                                                                  \
  asm volatile(                                                                                                   \
      "{\n"                                                                                                       \
      ".reg .pred p;\n"                                                                                           \
      "setp.ne.b32 p, %21, 0;\n"                                                                                  \
      "wgmma.mma_async.sync.aligned.m64n32k16.f32." #TYPE "." #TYPE                                               \
      " "                                                                                                         \
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, "                                  \
      "{%16, %17, %18, %19}, %20, p, 1, 1, %22;\n"                                                                \
      "}\n"                                                                                                       \
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),           \
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])      \
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(static_cast<int>(accumulate)), "n"(kTransB ? 1 : 0))

#define LLM_WGMMA_RS64_ASM(TYPE)                                                                                  \
  asm volatile(                                                                                                   \
      "{\n"                                                                                                       \
      ".reg .pred p;\n"                                                                                           \
      "setp.ne.b32 p, %37, 0;\n"                                                                                  \
      "wgmma.mma_async.sync.aligned.m64n64k16.f32." #TYPE "." #TYPE                                               \
      " "                                                                                                         \
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, " \
      "%23, %24, %25, %26, %27, %28, %29, %30, %31}, "                                                            \
      "{%32, %33, %34, %35}, %36, p, 1, 1, %38;\n"                                                                \
      "}\n"                                                                                                       \
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),           \
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),     \
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),   \
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])    \
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(static_cast<int>(accumulate)), "n"(kTransB ? 1 : 0))

#define LLM_WGMMA_RS128_ASM(TYPE)                                                                                 \
  asm volatile(                                                                                                   \
      "{\n"                                                                                                       \
      ".reg .pred p;\n"                                                                                           \
      "setp.ne.b32 p, %69, 0;\n"                                                                                  \
      "wgmma.mma_async.sync.aligned.m64n128k16.f32." #TYPE "." #TYPE                                              \
      " "                                                                                                         \
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, " \
      "%23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, "  \
      "%44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "      \
      "{%64, %65, %66, %67}, %68, p, 1, 1, %70;\n"                                                                \
      "}\n"                                                                                                       \
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),           \
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),     \
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),   \
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),   \
        "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),   \
        "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),   \
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),   \
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])    \
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(static_cast<int>(accumulate)), "n"(kTransB ? 1 : 0))

template <WgmmaRsType kType, bool kTransB>
struct WgmmaRs<kType, 32, kTransB> {
  static __device__ __forceinline__ void Run(float (&d)[16], const uint32_t (&a)[4], uint64_t b, bool accumulate) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if constexpr (kType == WgmmaRsType::kBF16)
      LLM_WGMMA_RS32_ASM(bf16);
    else
      LLM_WGMMA_RS32_ASM(f16);
#endif
  }
};

template <WgmmaRsType kType, bool kTransB>
struct WgmmaRs<kType, 64, kTransB> {
  static __device__ __forceinline__ void Run(float (&d)[32], const uint32_t (&a)[4], uint64_t b, bool accumulate) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if constexpr (kType == WgmmaRsType::kBF16)
      LLM_WGMMA_RS64_ASM(bf16);
    else
      LLM_WGMMA_RS64_ASM(f16);
#endif
  }
};

template <WgmmaRsType kType, bool kTransB>
struct WgmmaRs<kType, 128, kTransB> {
  static __device__ __forceinline__ void Run(float (&d)[64], const uint32_t (&a)[4], uint64_t b, bool accumulate) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if constexpr (kType == WgmmaRsType::kBF16)
      LLM_WGMMA_RS128_ASM(bf16);
    else
      LLM_WGMMA_RS128_ASM(f16);
#endif
  }
};

#undef LLM_WGMMA_RS128_ASM
#undef LLM_WGMMA_RS64_ASM
#undef LLM_WGMMA_RS32_ASM

// The PTX type must be a literal in the asm string, so the statement is written once here and
// expanded per type (TYPE: bf16 or f16). ACC: "+f" (d accumulated, predicate from %34) or "=f"
// (d written only, predicate false); the trailing operand list follows ACC.
#define LLM_WGMMA_SS64_ASM(TYPE, ACC, PRED, ...)                                                           \
  asm volatile(                                                                                            \
      "{\n"                                                                                                \
      ".reg .pred p;\n"                                                                                    \
      "setp.ne.b32 p, " PRED                                                                               \
      ", 0;\n"                                                                                             \
      "wgmma.mma_async.sync.aligned.m64n64k16.f32." #TYPE "." #TYPE                                        \
      " "                                                                                                  \
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, "             \
      "%19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "                                 \
      "%32, %33, p, 1, 1, 0, 0;\n"                                                                         \
      "}\n"                                                                                                \
      : ACC(d[0]), ACC(d[1]), ACC(d[2]), ACC(d[3]), ACC(d[4]), ACC(d[5]), ACC(d[6]), ACC(d[7]), ACC(d[8]), \
        ACC(d[9]), ACC(d[10]), ACC(d[11]), ACC(d[12]), ACC(d[13]), ACC(d[14]), ACC(d[15]), ACC(d[16]),     \
        ACC(d[17]), ACC(d[18]), ACC(d[19]), ACC(d[20]), ACC(d[21]), ACC(d[22]), ACC(d[23]), ACC(d[24]),    \
        ACC(d[25]), ACC(d[26]), ACC(d[27]), ACC(d[28]), ACC(d[29]), ACC(d[30]), ACC(d[31])                 \
      : __VA_ARGS__)
#define LLM_WGMMA_ACCUMULATED(x) "+f"(x)
#define LLM_WGMMA_WRITTEN(x) "=f"(x)

// d[64 x 64] = A[64 x 16] · B[64 x 16]ᵀ (+ d if `accumulate`), both 16-bit operands (kType) read
// from shared memory through K-major descriptors (WgmmaDescSwizzle128), d float32 as WgmmaFp8's.
// Shared memory written by the threads (st.shared, cp.async) must be made visible to the MMAs'
// asynchronous reads first: each writer's FenceProxyAsyncShared (bulk_copy.cuh), then a barrier.
template <WgmmaRsType kType>
struct WgmmaSs64 {
  static __device__ __forceinline__ void Run(float (&d)[32], uint64_t a, uint64_t b, bool accumulate) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if constexpr (kType == WgmmaRsType::kBF16)
      LLM_WGMMA_SS64_ASM(bf16, LLM_WGMMA_ACCUMULATED, "%34", "l"(a), "l"(b),
                         "r"(static_cast<int>(accumulate)));
    else
      LLM_WGMMA_SS64_ASM(f16, LLM_WGMMA_ACCUMULATED, "%34", "l"(a), "l"(b),
                         "r"(static_cast<int>(accumulate)));
#endif
  }
  // d = A · Bᵀ, d's earlier values neither read nor kept (their registers free before the MMA).
  static __device__ __forceinline__ void RunFirst(float (&d)[32], uint64_t a, uint64_t b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if constexpr (kType == WgmmaRsType::kBF16)
      LLM_WGMMA_SS64_ASM(bf16, LLM_WGMMA_WRITTEN, "0", "l"(a), "l"(b));
    else
      LLM_WGMMA_SS64_ASM(f16, LLM_WGMMA_WRITTEN, "0", "l"(a), "l"(b));
#endif
  }
};

#undef LLM_WGMMA_WRITTEN
#undef LLM_WGMMA_ACCUMULATED
#undef LLM_WGMMA_SS64_ASM

}  // namespace llm::cuda
