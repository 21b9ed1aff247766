// Internal: what the tensor-core attention kernels (prefill, decode) share: the m16n8k16 MMA and
// operand packing per 16-bit type, the SFU's exp2, ldmatrix's transposing form and the swizzled
// tile layout.
#pragma once

#include <type_traits>

#include "kernels/cuda/common/mma_sync.cuh"

namespace llm::cuda::attention {

// The m16n8k16 MMA on T operands, and two floats packed as the T pair an operand register holds
// (the first in the low half).
template <typename T>
struct MmaTraits {
  static_assert(std::is_same_v<T, __nv_bfloat16> || std::is_same_v<T, __half>, "16-bit operands");
  __device__ static uint32_t Pack(float lo, float hi) {
    uint32_t v;
    if constexpr (std::is_same_v<T, __half>) {
      const __half2 h = __floats2half2_rn(lo, hi);
      v = *reinterpret_cast<const uint32_t*>(&h);
    } else {
      const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
      v = *reinterpret_cast<const uint32_t*>(&h);
    }
    return v;
  }
  __device__ static void Mma(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
    Mma16816<T>::Run(c, a, b0, b1);
  }
};

// 2^x on the SFU in one instruction (exp2f adds a denormal-range fix-up around it): the
// probabilities it yields are in [0, 1], where flushing a denormal to zero changes nothing.
__device__ __forceinline__ float FastExp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

__device__ __forceinline__ void LdMatrixX4Trans(uint32_t r[4], const void* smem) {
  const uint32_t a = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
}

// Tiles in shared memory are [rows][D] of T, stored in 16-byte chunks XOR-swizzled by the row
// (chunk c of row r lives at chunk c ^ (r & 7)), so that the 8 rows an ldmatrix reads at one
// logical chunk fall in 8 different bank groups.
template <int D>
__device__ __forceinline__ int Swz(int row, int chunk) {
  return row * D + ((chunk ^ (row & 7)) << 3);
}

}  // namespace llm::cuda::attention
