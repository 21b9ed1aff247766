// The 4-bit tensors of one linear module as its checkpoint packs them, checked and decoded. Each
// packing is read exactly as its producer writes it and its producer's own reader decodes it:
//
//  AutoAWQ GEMM (awq/modules/linear/gemm.py WQLinear_GEMM.from_linear; awq/utils/packing_utils.py
//  dequantize_gemm): `qweight` i32 [K, N/8] holds row k's output columns 8j..8j+7 in word j, output
//  column 8j + order_map[i] in bits 4i..4i+3 with order_map = [0, 2, 4, 6, 1, 3, 5, 7] (so column
//  8j + c is nibble [0, 4, 1, 5, 2, 6, 3, 7][c]); `qzeros` i32 [K/g, N/8] packs the zeros the same
//  way; `scales` f16 [K/g, N]; W[n, k] = (q - zero) * scale of group k / g.
//
//  GPTQ (AutoGPTQ auto_gptq/nn_modules/qlinear/qlinear_cuda.py pack and its torch dequantization;
//  GPTQModel gptqmodel/nn_modules/qlinear/__init__.py pack_original): `qweight` i32 [K/8, N] holds
//  input rows 8i..8i+7 of column n in word (i, n), row 8i + j in bits 4j; `qzeros` i32 [G, N/8]
//  holds column 8j + c's zero in bits 4c of word j; `scales` f16 [G, N]; `g_idx` i32 [K] the group
//  of each input row (act-order: desc_act). Format "gptq" (v1) stores zero - 1 and its readers add
//  1 to the 4-bit field (so a stored 15 reads 16: AutoGPTQ's behaviour, kept); "gptq_v2" stores
//  the zero. W[n, k] = (q - zero) * scale of group g_idx[k].
//
//  compressed-tensors pack-quantized (compressed_tensors/compressors/pack_quantized/helpers.py
//  pack_to_int32, base.py, quantization/lifecycle/forward.py dequantize): `weight_packed` i32
//  [N, ceil(K/8)] holds column 8j + c of row n in bits 4c of word (n, j), as the signed value + 8;
//  `weight_zero_point` (asymmetric only) i32 [ceil(N/8), G] packed along the rows the same way
//  (row 8j + c in bits 4c of word (j, g)), also + 8; `weight_scale` [N, G]; `weight_g_idx` i32 [K]
//  (actorder "group"; -1 entries: column order); `weight_shape` i64 [N, K]. W[n, k] =
//  (q_signed - zero_signed) * scale = (stored q - stored zero) * scale, zero 8 when symmetric.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/model/checkpoint.h"
#include "engine/model/quantization_config.h"
#include "engine/model/weights.h"

namespace llm {

class Int4Module {
 public:
  // Looks up and checks `module`'s tensors ([n, k] weight) for `scheme` (an int4 scheme). Errors
  // name the tensor, its file (through `lookup`) and the scheme.
  static absl::StatusOr<Int4Module> Resolve(
      const std::function<absl::StatusOr<const TensorRecord*>(const std::string&, const std::vector<int64_t>&,
                                                              internal::TensorKind)>& lookup,
      const std::function<bool(const std::string&)>& exists, const std::string& module, int64_t n, int64_t k,
      const LinearScheme& scheme);

  const std::string& module() const { return module_; }
  int64_t n() const { return n_; }
  int64_t k() const { return k_; }
  int64_t groups() const { return groups_; }          // scale columns G
  int64_t group_size() const { return group_size_; }  // columns per group (K for one group)
  // Whether the columns' groups come from a g_idx that is not in column order (act-order).
  bool act_order() const { return !group_of_column_.empty(); }

  // The group of input column `col` (0 <= col < k).
  int64_t Group(int64_t col) const {
    return group_of_column_.empty() ? col / group_size_ : group_of_column_[col];
  }
  float Scale(int64_t row, int64_t group) const;
  int Zero(int64_t row, int64_t group) const;  // 0..16; 8 without zero points
  // Codes (0..15) of rows [row0, row0 + rows) and columns [col0, col0 + cols), out[r * cols + c].
  void Codes(int64_t row0, int64_t rows, int64_t col0, int64_t cols, uint8_t* out) const;

 private:
  Int4Module() = default;
  uint32_t Word(const TensorRecord* r, int64_t index) const;

  std::string module_;
  Int4Packing packing_ = Int4Packing::kNone;
  int64_t n_ = 0, k_ = 0, groups_ = 0, group_size_ = 0;
  bool zeros_minus_one_ = false;
  const TensorRecord* codes_ = nullptr;
  const TensorRecord* zeros_ = nullptr;
  const TensorRecord* scales_ = nullptr;
  std::vector<int32_t> group_of_column_;  // act-order only
};

}  // namespace llm
