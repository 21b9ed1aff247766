// The repacked int4 (W4A16) weight layout of engine/core/storage_format.h, on the host: where a
// code lives, how the loader writes one, and the values a LinearWeight holds, for the CPU oracle,
// the loader's dequantizing fallback and the tests. The CUDA kernels read the same layout
// (kernels/cuda/gemm/w4a16_common.cuh) with the same rule.
#pragma once

#include <algorithm>
#include <cstdint>

#include "absl/status/status.h"
#include "engine/core/storage_format.h"
#include "engine/core/tensor.h"

namespace llm {

inline constexpr int64_t kInt4Chunk = StorageFormat::kInt4Chunk;  // storage columns a chunk
inline constexpr int64_t kInt4ChunkBytes = kInt4Chunk / 2;        // 16 bytes a row
inline constexpr int64_t kInt4TileRows = StorageFormat::kInt4TileRows;  // rows a tile (16)
inline constexpr int64_t kInt4UnitChunks = StorageFormat::kInt4UnitChunks;  // chunks a unit (4)
inline constexpr int kInt4SymmetricZero = 8;                      // the zero of formats without zero points

// Where the codes of an [n, kp] int4 weight sit (storage_format.h): 16-row tiles stored one after
// the other, each a run of 4-chunk units, each unit its rows' chunks row by row; the last tile
// and the last unit may be short. `ChunkOffset` is the byte offset of chunk `chunk` of row `row`.
struct Int4Layout {
  int64_t n = 0, kp = 0;

  int64_t ChunkOffset(int64_t row, int64_t chunk) const {
    const int64_t tile = row / kInt4TileRows, unit = chunk / kInt4UnitChunks;
    const int64_t tile_rows = std::min(kInt4TileRows, n - tile * kInt4TileRows);
    const int64_t unit_chunks = std::min(kInt4UnitChunks, kp / kInt4Chunk - unit * kInt4UnitChunks);
    return tile * kInt4TileRows * (kp / 2) + unit * tile_rows * kInt4UnitChunks * kInt4ChunkBytes +
           ((row % kInt4TileRows) * unit_chunks + chunk % kInt4UnitChunks) * kInt4ChunkBytes;
  }
  // Byte and bit shift of storage column `col` of `row`. Column c of a chunk sits in 32-bit word
  // c / 8 (the chunk's columns 8w..8w + 7 in word w), as nibble (c % 8) / 2 + 4 (c % 2) of it:
  // the pair (8w + 2s, 8w + 2s + 1) in nibbles s and s + 4, so that one shift and one mask give
  // it as the two 16-bit halves an MMA fragment register holds, in x's own column order.
  int64_t ByteOf(int64_t row, int64_t col) const {
    return ChunkOffset(row, col / kInt4Chunk) + ByteInChunk(col % kInt4Chunk);
  }
  static int NibbleInWord(int64_t c) { return static_cast<int>((c % 8) / 2 + 4 * (c % 2)); }
  static int64_t ByteInChunk(int64_t c) { return (c % kInt4Chunk) / 8 * 4 + NibbleInWord(c) / 2; }
  static int ShiftOf(int64_t col) { return NibbleInWord(col) % 2 * 4; }

  // Writes `code` (0..15) as (row, col) of `codes` (zeroed first); reads one back.
  void Set(uint8_t* codes, int64_t row, int64_t col, uint8_t code) const {
    codes[ByteOf(row, col)] |= static_cast<uint8_t>((code & 0xF) << ShiftOf(col));
  }
  int Get(const uint8_t* codes, int64_t row, int64_t col) const {
    return (codes[ByteOf(row, col)] >> ShiftOf(col)) & 0xF;
  }
};

// The chunks of every group when chunk c (storage order) is in group c / that count for every
// c of `chunk_group` (groups of equal whole chunks, the last one possibly short), else 0. Kernels
// may then compute a chunk's group instead of reading the map.
inline int64_t Int4GroupChunks(const int32_t* chunk_group, int64_t chunks) {
  int64_t g = 0;
  while (g < chunks && chunk_group[g] == 0) ++g;
  if (g == 0) return 0;
  for (int64_t c = 0; c < chunks; ++c)
    if (chunk_group[c] != c / g) return 0;
  return g;
}

// Plain pointers to an int4 LinearWeight's host tensors.
struct Int4View {
  const uint8_t* weight = nullptr;        // [n, kp / 2] bytes, in Int4Layout{n, kp}
  const void* scale = nullptr;            // [n, groups] of scale_dtype (f32 or f16)
  DType scale_dtype = DType::kF32;
  const uint8_t* zero = nullptr;          // [n, groups], or null: 8
  const int32_t* chunk_group = nullptr;   // [kp / 32]
  const int32_t* input_perm = nullptr;    // [kp], or null: storage column j is input column j
  int64_t n = 0, k = 0, kp = 0, groups = 0;

  float Scale(int64_t row, int64_t group) const;
  int Zero(int64_t row, int64_t group) const {
    return zero ? zero[row * groups + group] : kInt4SymmetricZero;
  }
};

// The tensors of an int4 weight (LinearWeight's weight, scale, zero, chunk_group, input_perm and
// in_features), as a view of host memory.
Int4View MakeInt4View(const Tensor& weight, const Tensor& scale, const Tensor& zero, const Tensor& chunk_group,
                      const Tensor& input_perm, int64_t k);

// Checks that an int4 weight's tensors agree with `format` and with each other (shapes, dtypes;
// for host tensors also the chunk map's groups and the permutation's columns); `op` names the
// caller in the message.
absl::Status ValidateInt4(const StorageFormat& format, const Tensor& weight, const Tensor& scale, const Tensor& zero,
                          const Tensor& chunk_group, const Tensor& input_perm, int64_t k, const char* op);

// Row `row`'s values in storage order: out[j] = (code - zero) * scale of storage column j, 0 for
// padding columns. Exact for 16-bit scales ((code - zero) has 5 bits); float32 scales round once,
// as the references' float32 products do.
void DequantizeInt4StorageRow(const Int4View& w, int64_t row, float* out);

// The weight as float32 [n, k] in input-column order (act-order undone, padding dropped).
void DequantizeInt4(const Int4View& w, float* out);

}  // namespace llm
