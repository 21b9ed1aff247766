// Int4 (W4A16) weights in the repacked layout of engine/core/storage_format.h, as the W4A16
// kernels read them (gemv_w4a16_mma.cu, gemm_w4a16.cu, w4a16_dequant.cu):
//
//   codes        u8 [N, Kp / 2]: 32-column chunks of 16 bytes of a row; within a chunk, 32-bit
//                word w holds columns 8w..8w + 7, the pair (8w + 2s, 8w + 2s + 1) in nibbles s and
//                s + 4: a shift and a LOP3 give it as a fragment register's two halves, in x's
//                column order (W4CodePair). The chunks sit in 16-row tiles of 4-chunk units, in
//                the order the tensor-core GEMV's warps stream them (W4ChunkOffset).
//   scales       f16 [N, G], zeros u8 [N, G] (absent: 8), chunk_group i32 [Kp / 32]: the scale and
//                zero of chunk c of row n are at (n, chunk_group[c]).
//
// A value is (code - zero) * scale. The kernels form (code - zero) exactly in the 16-bit type (a
// code OR-ed into the mantissa of 128.0 (bf16) or 1024.0 (f16) is 128 + code / 1024 + code, and
// the difference of two such is exact), and apply the scale to float32 sums.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "kernels/cuda/common/device_utils.cuh"

namespace llm::cuda {

inline constexpr int kW4Chunk = 32;       // columns a chunk
inline constexpr int kW4ChunkBytes = 16;  // bytes a chunk of one row
inline constexpr int kW4SymmetricZero = 8;
inline constexpr int kW4TileRows = 16;   // rows a tile
inline constexpr int kW4UnitChunks = 4;  // chunks a unit

// Rows of the tile that holds row `row` of an N-row weight (16 but for the last tile), and chunks
// of the unit that holds chunk `chunk` of a kv-chunk row (4 but for the last unit).
__host__ __device__ __forceinline__ int W4TileRows(int row, int n) {
  const int first = row - row % kW4TileRows;
  return n - first < kW4TileRows ? n - first : kW4TileRows;
}
__host__ __device__ __forceinline__ int W4UnitChunks(int chunk, int kv) {
  const int first = chunk - chunk % kW4UnitChunks;
  return kv - first < kW4UnitChunks ? kv - first : kW4UnitChunks;
}

// Byte offset of chunk `chunk` of row `row` (engine/core/int4_layout.h's Int4Layout::ChunkOffset):
// tiles of 16 rows one after the other, each a run of units, each unit its rows' chunks row by row.
__host__ __device__ __forceinline__ int64_t W4ChunkOffset(int row, int chunk, int n, int kv) {
  const int tile_rows = W4TileRows(row, n), unit_chunks = W4UnitChunks(chunk, kv);
  return static_cast<int64_t>(row / kW4TileRows) * kW4TileRows * kv * kW4ChunkBytes +
         static_cast<int64_t>(chunk / kW4UnitChunks) * tile_rows * kW4UnitChunks * kW4ChunkBytes +
         ((row % kW4TileRows) * unit_chunks + chunk % kW4UnitChunks) * kW4ChunkBytes;
}

// The pair type of T and the bits of 128.0 (bf16) / 1024.0 (f16), whose mantissa holds a code.
template <typename T>
struct W4Pair;
template <>
struct W4Pair<__nv_bfloat16> {
  using T2 = __nv_bfloat162;
  static constexpr uint32_t kBase = 0x4300u;  // bf16 128.0: 7 mantissa bits, codes up to 16 exact
};
template <>
struct W4Pair<__half> {
  using T2 = __half2;
  static constexpr uint32_t kBase = 0x6400u;  // f16 1024.0
};

// (base + code) of the column pair (8w + 2s, 8w + 2s + 1) of word w (nibbles s and s + 4): the
// first column in the low half. One LOP3 with the base in a register (an instruction takes one
// immediate; left to itself the compiler spends two).
template <typename T>
__device__ __forceinline__ uint32_t W4CodePair(uint32_t word, int s) {
  uint32_t pair;
  const uint32_t base = W4Pair<T>::kBase * 0x00010001u;
  asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(pair) : "r"(word >> (4 * s)), "n"(0x000F000F), "r"(base));  // (a & b) | c
  return pair;
}

// Code word i (0..3) of a chunk's 16 bytes.
__device__ __forceinline__ uint32_t W4Word(const uint4& v, int i) { return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w; }

// (base + zero) in both halves.
template <typename T>
__device__ __forceinline__ uint32_t W4ZeroPair(int zero) {
  return (W4Pair<T>::kBase | static_cast<uint32_t>(zero)) * 0x00010001u;
}

// a - b on pairs of T (exact for the small integers here).
template <typename T>
__device__ __forceinline__ uint32_t W4SubPair(uint32_t a, uint32_t b) {
  using T2 = typename W4Pair<T>::T2;
  T2 r = __hsub2(*reinterpret_cast<const T2*>(&a), *reinterpret_cast<const T2*>(&b));
  return *reinterpret_cast<const uint32_t*>(&r);
}

// The exact (code - zero) pair of columns (8w + 2s, 8w + 2s + 1) of word w.
template <typename T>
__device__ __forceinline__ uint32_t W4ValuePair(uint32_t word, int s, uint32_t zero_pair) {
  return W4SubPair<T>(W4CodePair<T>(word, s), zero_pair);
}

// mma.m16n8k16's A fragment for half h (one k16 step) of code word w of a lane's rows g
// (`word_a`) and g + 8 (`word_b`): K slots (2t, 2t + 1) hold columns (8w + 4h, + 1), slots
// (2t + 8, 2t + 9) columns (8w + 4h + 2, + 3), as exact (code - zero) pairs.
template <typename T>
__device__ __forceinline__ void W4AFragment(uint32_t word_a, uint32_t word_b, int h, uint32_t zero_a, uint32_t zero_b,
                                            uint32_t (&a)[4]) {
  a[0] = W4ValuePair<T>(word_a, 2 * h, zero_a);
  a[1] = W4ValuePair<T>(word_b, 2 * h, zero_b);
  a[2] = W4ValuePair<T>(word_a, 2 * h + 1, zero_a);
  a[3] = W4ValuePair<T>(word_b, 2 * h + 1, zero_b);
}

// acc += scale x sums on an m16n8 C fragment: elements 0-1 are row g's (scale_a), 2-3 row g + 8's
// (scale_b). Scales apply per group, so each group's MMA sums are kept apart and scaled here.
__device__ __forceinline__ void W4AccumulateScaled(float (&acc)[4], const float (&sums)[4], float scale_a,
                                                   float scale_b) {
  acc[0] += scale_a * sums[0];
  acc[1] += scale_a * sums[1];
  acc[2] += scale_b * sums[2];
  acc[3] += scale_b * sums[3];
}

__device__ __forceinline__ float2 W4PairToFloat2(uint32_t p, __nv_bfloat16*) {
  return make_float2(__uint_as_float(p << 16), __uint_as_float(p & 0xFFFF0000u));
}
__device__ __forceinline__ float2 W4PairToFloat2(uint32_t p, __half*) {
  return __half22float2(*reinterpret_cast<const __half2*>(&p));
}

}  // namespace llm::cuda
