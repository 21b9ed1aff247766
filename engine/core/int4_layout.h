// The repacked int4 (W4A16) weight layout of engine/core/storage_format.h, on the host: where a
// code lives, how the loader writes one, and the values a LinearWeight holds, for the CPU oracle,
// the loader's dequantizing fallback and the tests. The CUDA kernels read the same layout
// (kernels/cuda/gemm/w4a16_common.cuh) with the same rule.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "engine/core/storage_format.h"
#include "engine/core/tensor.h"

namespace llm {

inline constexpr int64_t kInt4Chunk = StorageFormat::kInt4Chunk;  // storage columns a chunk
inline constexpr int64_t kInt4ChunkBytes = kInt4Chunk / 2;        // 16 bytes a row
inline constexpr int kInt4SymmetricZero = 8;                      // the zero of formats without zero points

// Byte (from the row's start) and bit shift of storage column `col`'s code: column c of a chunk
// sits in 32-bit word (c % 8) / 2, byte c / 8 of that word, low nibble for even c.
inline int64_t Int4ByteOf(int64_t col) {
  const int64_t c = col % kInt4Chunk;
  return (col / kInt4Chunk) * kInt4ChunkBytes + ((c % 8) / 2) * 4 + c / 8;
}
inline int Int4ShiftOf(int64_t col) { return static_cast<int>(col % 2) * 4; }

// Writes `code` (0..15) as storage column `col` of the row starting at `row_bytes` (zeroed first).
inline void SetInt4Code(uint8_t* row_bytes, int64_t col, uint8_t code) {
  row_bytes[Int4ByteOf(col)] |= static_cast<uint8_t>((code & 0xF) << Int4ShiftOf(col));
}
inline int Int4Code(const uint8_t* row_bytes, int64_t col) {
  return (row_bytes[Int4ByteOf(col)] >> Int4ShiftOf(col)) & 0xF;
}

// Plain pointers to an int4 LinearWeight's host tensors.
struct Int4View {
  const uint8_t* weight = nullptr;        // [n, kp / 2]
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
