// StorageFormat: how a weight (or a KV cache) is stored, declared rather than implied by the
// activation dtype: its element type, and for scaled (quantized) formats the granularity of the
// scales that turn stored elements back into values.
//
//   granularity   scale tensor                    one scale per
//   kNone         none                            -
//   kTensor       f32 [1]                         whole tensor
//   kChannel      f32 [N]                         output row
//   kBlock        f32 [ceil(N/br), ceil(K/bc)]    br x bc tile (DeepSeek-V3 / Qwen3-FP8: 128 x 128)
//   kGroup        f32 [N, ceil(K/bc)]             output row and bc-column group
//   kChunkGroup   f32 or f16 [N, G]               output row and quantization group (int4, below)
//
// FP8 (element kF8E4M3): value = element * scale. ScaleGrid turns the first four into one index
// rule, so kernels need no switch over granularities. A checkpoint's per-tensor scales of fused
// projections (q/k/v, gate/up) become kChannel, and 128 x 128 blocks that fused parts or
// tensor-parallel slices cut mid-block become kGroup; both expansions are exact (see
// engine/model/weights.cc).
//
// Int4 (element kU4, W4A16; engine/model/int4_repack.h makes it from AutoAWQ, GPTQ and
// compressed-tensors checkpoints): value = (code - zero) * scale, code in [0, 15], zero in
// [0, 16] (GPTQ v1 can store 16), the scale and zero of the element's (output row, group). The
// layout is the one the kernels stream (kernels/cuda/gemm/w4a16_common.cuh):
//   weight       u8 [N, Kp / 2]  Kp storage columns in chunks of 32 (16 bytes of a row). Within a
//                                chunk, column c is in 32-bit word (c % 8) / 2, byte c / 8, low
//                                nibble for even c: word t of a chunk holds, byte by byte, the
//                                column pairs (2t, 2t + 1), (8 + 2t, ..), (16 + 2t, ..),
//                                (24 + 2t, ..): exactly what lane t of a tensor-core quad needs
//                                for two m16n8k16 steps, so one 32-bit load feeds them.
//                                The chunks are stored in the order the tensor-core GEMV's warps
//                                consume them: rows in tiles of 16 (the MMA's M), each tile's
//                                bytes contiguous; within a tile, units of 4 chunks (K order),
//                                each unit holding its 16 rows' 4 chunks row by row (1 KB). A
//                                warp's load of one unit's rows 0-7 (lane 4g + t: row g, chunk t)
//                                is then 512 contiguous bytes, and a warp streams its tile as one
//                                contiguous region. The last tile (N % 16 rows) and the last unit
//                                (Kp / 32 % 4 chunks) are short: Int4Layout (int4_layout.h) has
//                                the offsets.
//   scale        [N, G]          f32 (float32 backends: exact) or f16 (16-bit backends: exact for
//                                the fp16 scales of AWQ / GPTQ, and for bf16 scales in fp16's range)
//   zero         u8 [N, G]       empty when the format has no zero points (symmetric: zero 8)
//   chunk_group  i32 [Kp / 32]   the group of every chunk: a chunk never spans two groups
//   input_perm   i32 [Kp]        empty, or storage column j reads input column input_perm[j]
//                                (-1: a padding column, weight 0), for act-order (GPTQ desc_act,
//                                compressed-tensors actorder "group"), whose groups are made
//                                contiguous by sorting the columns by group, each group padded to
//                                whole chunks; and for group sizes that are not multiples of 32.
// Without act-order and with groups of a multiple of 32 columns, Kp = K, storage column j is input
// column j and chunk c is in group c * 32 / group_size.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "kernels/core/dtype.h"

namespace llm {

enum class ScaleGranularity : uint8_t { kNone, kTensor, kChannel, kBlock, kGroup, kChunkGroup };
// "none", "tensor", "channel", "block", "group", "chunk group"
std::string_view ScaleGranularityName(ScaleGranularity g);

struct StorageFormat {
  DType element = DType::kF32;
  ScaleGranularity granularity = ScaleGranularity::kNone;
  int32_t block_rows = 0;  // kBlock
  int32_t block_cols = 0;  // kBlock and kGroup; kChunkGroup: the chunk, 32 columns
  DType scale_dtype = DType::kF32;  // kF32; int4 also kF16
  bool zero_points = false;         // int4: a zero per (row, group); else 8

  static constexpr int32_t kInt4Chunk = 32;     // storage columns of one int4 chunk (16 bytes a row)
  static constexpr int32_t kInt4TileRows = 16;  // rows of an int4 tile (the m16n8k16 MMA's M)
  static constexpr int32_t kInt4UnitChunks = 4; // chunks of an int4 unit (one a lane of a quad)

  static StorageFormat Float(DType element) { return {element, ScaleGranularity::kNone, 0, 0}; }
  static StorageFormat Fp8(ScaleGranularity granularity, int32_t block_rows = 0, int32_t block_cols = 0) {
    return {DType::kF8E4M3, granularity, block_rows, block_cols};
  }
  static StorageFormat Int4(bool zero_points, DType scale_dtype) {
    return {DType::kU4, ScaleGranularity::kChunkGroup, 0, kInt4Chunk, scale_dtype, zero_points};
  }
  bool int4() const { return element == DType::kU4; }
  bool scaled() const { return granularity != ScaleGranularity::kNone; }
  bool operator==(const StorageFormat&) const = default;
  // "bfloat16", "float8_e4m3fn per-channel", "float8_e4m3fn 128x128 blocks", ...
  std::string ToString() const;
};

// The dtype of the tensor that holds the elements: kU8 for int4 (two codes a byte), else `element`.
inline DType StoredDType(DType element) { return element == DType::kU4 ? DType::kU8 : element; }

// Where the scale of weight element (row, col) of an [n, k] tensor lives (FP8 granularities):
// scale[(row / rows_per) * cols + col / cols_per], the scale tensor viewed as [rows, cols].
struct ScaleGrid {
  int64_t rows = 0, cols = 0;
  int64_t rows_per = 1, cols_per = 1;
  int64_t numel() const { return rows * cols; }
  int64_t Index(int64_t row, int64_t col) const { return (row / rows_per) * cols + col / cols_per; }
};
// An unscaled format, and int4's kChunkGroup (whose groups LinearWeight::chunk_group names),
// give the empty grid.
ScaleGrid ScaleGridFor(const StorageFormat& format, int64_t n, int64_t k);

// How the activations entering a linear with scaled FP8 weights are quantized (W8A8). kNone:
// they stay in the activation dtype and the weights are dequantized on the fly (W8A16).
enum class ActivationQuant : uint8_t {
  kNone,
  kDynamicPerToken,  // one scale per row, amax / 448, computed at run time
  kStaticPerTensor,  // the checkpoint's input_scale
  kDynamicPerGroup,  // one scale per row and group of columns (the block layout: 128)
};
std::string_view ActivationQuantName(ActivationQuant q);

}  // namespace llm
