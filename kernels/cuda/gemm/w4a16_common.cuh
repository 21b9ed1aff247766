// Int4 (W4A16) weights in the repacked layout of engine/core/storage_format.h, as the W4A16
// kernels read them (gemv_w4a16_mma.cu, gemm_w4a16.cu, w4a16_dequant.cu):
//
//   codes        u8 [N, Kp / 2]: 32-column chunks of 16 bytes of a row; within a chunk, 32-bit
//                word t holds in its byte b the columns (8b + 2t, 8b + 2t + 1), the lower one in
//                the low nibble: lane t of a tensor-core quad gets its m16n8k16 A fragments of two
//                k16 steps from one word. The chunks sit in 16-row tiles of 4-chunk units, in the
//                order the tensor-core GEMV's warps stream them (W4ChunkOffset).
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

// The codes of byte `b` of `word` as a pair (base + low nibble, base + high nibble), the low
// nibble's value in the low half.
template <typename T>
__device__ __forceinline__ uint32_t W4CodePair(uint32_t word, int b) {
  const uint32_t x = word >> (8 * b);
  return (x & 0xFu) | ((x & 0xF0u) << 12) | (W4Pair<T>::kBase * 0x00010001u);
}

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

__device__ __forceinline__ float2 W4PairToFloat2(uint32_t p, __nv_bfloat16*) {
  return make_float2(__uint_as_float(p << 16), __uint_as_float(p & 0xFFFF0000u));
}
__device__ __forceinline__ float2 W4PairToFloat2(uint32_t p, __half*) {
  return __half22float2(*reinterpret_cast<const __half2*>(&p));
}

// The 32 values (code - zero) of one chunk (a 16-byte vector of one row), in column order.
template <typename T>
__device__ __forceinline__ void W4DequantChunk(const uint4& v, uint32_t zero_pair, float (&wf)[kW4Chunk]) {
  const uint32_t words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int t = 0; t < 4; ++t) {
#pragma unroll
    for (int b = 0; b < 4; ++b) {
      const float2 f = W4PairToFloat2(W4SubPair<T>(W4CodePair<T>(words[t], b), zero_pair), static_cast<T*>(nullptr));
      wf[8 * b + 2 * t] = f.x;
      wf[8 * b + 2 * t + 1] = f.y;
    }
  }
}

// sum_i wf[i] * x[i] over the 32 columns of a chunk (x 16-byte aligned).
template <typename T>
__device__ __forceinline__ float W4DotChunk(const float (&wf)[kW4Chunk], const T* x) {
  float s = 0.0f;
#pragma unroll
  for (int q = 0; q < kW4Chunk / Vec16<T>::kVec; ++q) {
    const Vec16<T> xv = LoadVec(x + q * Vec16<T>::kVec);
#pragma unroll
    for (int e = 0; e < Vec16<T>::kVec; ++e) s += wf[q * Vec16<T>::kVec + e] * ToFloat(xv.v[e]);
  }
  return s;
}

}  // namespace llm::cuda
