// Repacking a linear's 4-bit checkpoint tensors (engine/model/int4_checkpoint.h), once, at load,
// into the layout the kernels stream (engine/core/storage_format.h, engine/core/int4_layout.h):
// the linear's parts (q/k/v or gate/up, each a row range of its module) and this rank's columns
// (a row-parallel slice of K) become one [N, Kp / 2] array of codes in 32-column chunks, [N, G]
// scales and zeros, the group of each chunk and, for act-order, the input column of each
// storage column.
//
// Tensor-parallel rules: without act-order a slice of K must keep whole groups (else the error
// names the layer, the columns and the group size). With act-order (GPTQ desc_act, compressed-
// tensors actorder "group") any slice works: its columns are sorted by group (stable), so each
// group's columns are contiguous, and each group is padded to whole 32-column chunks (padding
// columns read no input); the parts of a fused projection must share one g_idx.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/model/int4_checkpoint.h"

namespace llm {

// Rows [src_row, src_row + rows) and columns [src_col, src_col + cols) of `module`'s weight, at
// destination rows from dst_row. All parts of a linear take the same columns.
struct Int4Part {
  const Int4Module* module = nullptr;
  int64_t src_row = 0, rows = 0;
  int64_t src_col = 0, cols = 0;
  int64_t dst_row = 0;
};

// The shape of a repacked linear, decided before memory is carved.
struct Int4Plan {
  int64_t n = 0;       // output rows
  int64_t k = 0;       // input columns (this rank's)
  int64_t kp = 0;      // storage columns, a multiple of 32
  int64_t groups = 0;  // G: the groups this rank's columns touch
  bool zero_points = false;           // some zero differs from 8
  std::vector<int32_t> chunk_group;   // [kp / 32]
  std::vector<int32_t> input_perm;    // [kp], or empty: storage column j is input column j
  std::vector<int64_t> source_group;  // [groups]: the checkpoint's group of each
};

// Plans `parts` (one linear, `label` for messages: "layer 3 down_proj").
absl::StatusOr<Int4Plan> PlanInt4Linear(const std::string& label, const std::vector<Int4Part>& parts);

// The plan of a linear without a checkpoint (dummy weights, quantization at load): groups of
// `group_size` columns in column order (a multiple of 32, dividing k).
Int4Plan ColumnOrderInt4Plan(int64_t n, int64_t k, int64_t group_size, bool zero_points);

// The repacked tensors' contents (host memory, sizes from the plan).
void FillInt4Codes(const Int4Plan& plan, const std::vector<Int4Part>& parts, uint8_t* codes /* [n, kp / 2] */);
// `scale_dtype` kF32 or kF16 (rounded to nearest; exact for the fp16 scales of AWQ and GPTQ).
void FillInt4Scales(const Int4Plan& plan, const std::vector<Int4Part>& parts, DType scale_dtype,
                    void* scales /* [n, groups] */);
void FillInt4Zeros(const Int4Plan& plan, const std::vector<Int4Part>& parts, uint8_t* zeros /* [n, groups] */);

}  // namespace llm
