// StorageFormat: how a weight (or a KV cache) is stored, declared rather than implied by the
// activation dtype: its element type, and for scaled (quantized) formats the granularity of the
// float32 scales that turn stored elements back into values (value = element * scale).
//
//   granularity   scale tensor (f32)              one scale per
//   kNone         none                            -
//   kTensor       [1]                             whole tensor
//   kChannel      [N]                             output row
//   kBlock        [ceil(N/br), ceil(K/bc)]        br x bc tile (DeepSeek-V3 / Qwen3-FP8: 128 x 128)
//   kGroup        [N, ceil(K/bc)]                 output row and bc-column group
//
// ScaleGrid turns any of them into one index rule, so kernels need no switch over granularities.
// A checkpoint's per-tensor scales of fused projections (q/k/v, gate/up) become kChannel, and
// 128 x 128 blocks that fused parts or tensor-parallel slices cut mid-block become kGroup; both
// expansions are exact (see engine/model/weights.cc).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "kernels/core/dtype.h"

namespace llm {

enum class ScaleGranularity : uint8_t { kNone, kTensor, kChannel, kBlock, kGroup };
std::string_view ScaleGranularityName(ScaleGranularity g);  // "none", "tensor", "channel", "block", "group"

struct StorageFormat {
  DType element = DType::kF32;
  ScaleGranularity granularity = ScaleGranularity::kNone;
  int32_t block_rows = 0;  // kBlock
  int32_t block_cols = 0;  // kBlock and kGroup

  static StorageFormat Float(DType element) { return {element, ScaleGranularity::kNone, 0, 0}; }
  static StorageFormat Fp8(ScaleGranularity granularity, int32_t block_rows = 0, int32_t block_cols = 0) {
    return {DType::kF8E4M3, granularity, block_rows, block_cols};
  }
  bool scaled() const { return granularity != ScaleGranularity::kNone; }
  bool operator==(const StorageFormat&) const = default;
  // "bfloat16", "float8_e4m3fn per-channel", "float8_e4m3fn 128x128 blocks", ...
  std::string ToString() const;
};

// Where the scale of weight element (row, col) of an [n, k] tensor lives:
// scale[(row / rows_per) * cols + col / cols_per], the scale tensor viewed as [rows, cols].
struct ScaleGrid {
  int64_t rows = 0, cols = 0;
  int64_t rows_per = 1, cols_per = 1;
  int64_t numel() const { return rows * cols; }
  int64_t Index(int64_t row, int64_t col) const { return (row / rows_per) * cols + col / cols_per; }
};
// An unscaled format gives the empty grid.
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
