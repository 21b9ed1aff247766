#include "engine/model/int4_checkpoint.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "kernels/core/status.h"

namespace llm {
namespace {

// AutoAWQ's packing puts output column 8j + order_map[i] in nibble i (order_map = [0, 2, 4, 6,
// 1, 3, 5, 7]); its readers undo it with this inverse (AWQ_REVERSE_ORDER): column 8j + c is in
// nibble kAwqNibbleOfColumn[c].
constexpr int kAwqNibbleOfColumn[8] = {0, 4, 1, 5, 2, 6, 3, 7};

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

absl::Status WithScheme(const absl::Status& s, const LinearScheme& scheme) {
  if (s.ok()) return s;
  return absl::Status(s.code(), absl::StrCat(s.message(), " (quantization: ", scheme.description, ")"));
}

int32_t ReadI32(const TensorRecord& r, int64_t index) {
  int32_t v;
  std::memcpy(&v, static_cast<const char*>(r.data) + index * 4, 4);
  return v;
}

}  // namespace

absl::StatusOr<Int4Module> Int4Module::Resolve(
    const std::function<absl::StatusOr<const TensorRecord*>(const std::string&, const std::vector<int64_t>&,
                                                            internal::TensorKind)>& lookup,
    const std::function<bool(const std::string&)>& exists, const std::string& module, int64_t n, int64_t k,
    const LinearScheme& s) {
  using internal::TensorKind;
  Int4Module m;
  m.module_ = module;
  m.packing_ = s.int4;
  m.n_ = n;
  m.k_ = k;
  m.group_size_ = s.group_size > 0 ? s.group_size : k;
  m.groups_ = CeilDiv(k, m.group_size_);
  m.zeros_minus_one_ = s.zeros_minus_one;
  auto get = [&](const std::string& suffix, std::vector<int64_t> shape,
                 TensorKind kind) -> absl::StatusOr<const TensorRecord*> {
    absl::StatusOr<const TensorRecord*> r = lookup(module + suffix, shape, kind);
    RETURN_IF_ERROR(WithScheme(r.status(), s));
    return *r;
  };
  auto shape_error = [&](const std::string& what) {
    return WithScheme(absl::InvalidArgumentError(absl::StrCat("'", module, "' (weight [", n, ", ", k, "]): ", what)),
                      s);
  };
  const TensorRecord* g_idx = nullptr;
  switch (s.int4) {
    case Int4Packing::kAwqGemm: {
      if (n % 8 != 0) return shape_error("AutoAWQ packs 8 output columns a word, and N is not a multiple of 8");
      if (k % m.group_size_ != 0)
        return shape_error(absl::StrCat("K is not a multiple of the group size ", m.group_size_));
      ASSIGN_OR_RETURN(m.codes_, get(".qweight", {k, n / 8}, TensorKind::kI32));
      ASSIGN_OR_RETURN(m.zeros_, get(".qzeros", {m.groups_, n / 8}, TensorKind::kI32));
      ASSIGN_OR_RETURN(m.scales_, get(".scales", {m.groups_, n}, TensorKind::kScale));
      break;
    }
    case Int4Packing::kGptq: {
      if (k % 8 != 0) return shape_error("GPTQ packs 8 input rows a word, and K is not a multiple of 8");
      if (n % 8 != 0) return shape_error("GPTQ packs the zeros of 8 output columns a word, and N is not a multiple of 8");
      ASSIGN_OR_RETURN(m.codes_, get(".qweight", {k / 8, n}, TensorKind::kI32));
      ASSIGN_OR_RETURN(m.zeros_, get(".qzeros", {m.groups_, n / 8}, TensorKind::kI32));
      ASSIGN_OR_RETURN(m.scales_, get(".scales", {m.groups_, n}, TensorKind::kScale));
      if (exists(module + ".g_idx")) {
        ASSIGN_OR_RETURN(g_idx, get(".g_idx", {k}, TensorKind::kI32));
      } else if (s.act_order) {
        return WithScheme(absl::NotFoundError(absl::StrCat("'", module, ".g_idx' is missing: desc_act (act-order) "
                                                                        "needs each input row's group")),
                          s);
      }
      break;
    }
    case Int4Packing::kCompressedTensors: {
      if (k > m.group_size_ && k % m.group_size_ != 0)
        return shape_error(absl::StrCat("K is not a multiple of the group size ", m.group_size_));
      ASSIGN_OR_RETURN(m.codes_, get(".weight_packed", {n, CeilDiv(k, 8)}, TensorKind::kI32));
      ASSIGN_OR_RETURN(const TensorRecord* shape, get(".weight_shape", {2}, TensorKind::kI64));
      int64_t dims[2];
      std::memcpy(dims, shape->data, sizeof(dims));
      if (dims[0] != n || dims[1] != k)
        return shape_error(absl::StrCat("'", module, ".weight_shape' says [", dims[0], ", ", dims[1], "]"));
      ASSIGN_OR_RETURN(m.scales_, get(".weight_scale", {n, m.groups_}, TensorKind::kScale));
      if (s.zero_points) {
        ASSIGN_OR_RETURN(m.zeros_, get(".weight_zero_point", {CeilDiv(n, 8), m.groups_}, TensorKind::kI32));
      }
      if (exists(module + ".weight_g_idx")) {
        ASSIGN_OR_RETURN(g_idx, get(".weight_g_idx", {k}, TensorKind::kI32));
      } else if (s.act_order) {
        return WithScheme(absl::NotFoundError(absl::StrCat("'", module, ".weight_g_idx' is missing: actorder "
                                                                        "'group' needs each column's group")),
                          s);
      }
      break;
    }
    case Int4Packing::kNone:
      return absl::InternalError(absl::StrCat(module, ": not a 4-bit scheme"));
  }
  if (g_idx != nullptr) {
    std::vector<int32_t> groups(k);
    bool column_order = true, unset = false;
    for (int64_t c = 0; c < k; ++c) {
      groups[c] = ReadI32(*g_idx, c);
      unset = unset || groups[c] == -1;  // compressed-tensors' "not initialized": column order
      column_order = column_order && groups[c] == c / m.group_size_;
    }
    if (!unset && !column_order) {
      for (int64_t c = 0; c < k; ++c)
        if (groups[c] < 0 || groups[c] >= m.groups_)
          return WithScheme(absl::InvalidArgumentError(absl::StrCat("'", g_idx->name, "' maps input column ", c,
                                                                    " to group ", groups[c], " of ", m.groups_)),
                            s);
      m.group_of_column_ = std::move(groups);
    }
  }
  return m;
}

uint32_t Int4Module::Word(const TensorRecord* r, int64_t index) const {
  return static_cast<uint32_t>(ReadI32(*r, index));
}

float Int4Module::Scale(int64_t row, int64_t group) const {
  // AWQ / GPTQ scales are [G, N], compressed-tensors' [N, G].
  const int64_t i = packing_ == Int4Packing::kCompressedTensors ? row * groups_ + group : group * n_ + row;
  float v = 0.0f;
  ConvertToFloat(scales_->dtype, static_cast<const char*>(scales_->data) + i * DTypeSize(scales_->dtype), &v, 1);
  return v;
}

int Int4Module::Zero(int64_t row, int64_t group) const {
  switch (packing_) {
    case Int4Packing::kAwqGemm:
      return (Word(zeros_, group * (n_ / 8) + row / 8) >> (4 * kAwqNibbleOfColumn[row % 8])) & 0xF;
    case Int4Packing::kGptq:
      return ((Word(zeros_, group * (n_ / 8) + row / 8) >> (4 * (row % 8))) & 0xF) + (zeros_minus_one_ ? 1 : 0);
    case Int4Packing::kCompressedTensors:
      if (zeros_ == nullptr) return 8;
      return (Word(zeros_, (row / 8) * groups_ + group) >> (4 * (row % 8))) & 0xF;
    case Int4Packing::kNone:
      break;
  }
  return 8;
}

void Int4Module::Codes(int64_t row0, int64_t rows, int64_t col0, int64_t cols, uint8_t* out) const {
  // Tiles of 64 x 64, so that the strided side of each packing stays in cache.
  constexpr int64_t kTile = 64;
  for (int64_t rt = 0; rt < rows; rt += kTile) {
    for (int64_t ct = 0; ct < cols; ct += kTile) {
      const int64_t r_end = std::min(rows, rt + kTile), c_end = std::min(cols, ct + kTile);
      switch (packing_) {
        case Int4Packing::kAwqGemm:  // qweight [K, N / 8]: a row of it is an input column
          for (int64_t c = ct; c < c_end; ++c) {
            const int64_t k = col0 + c;
            for (int64_t r = rt; r < r_end; ++r) {
              const int64_t n = row0 + r;
              out[r * cols + c] = (Word(codes_, k * (n_ / 8) + n / 8) >> (4 * kAwqNibbleOfColumn[n % 8])) & 0xF;
            }
          }
          break;
        case Int4Packing::kGptq:  // qweight [K / 8, N]
          for (int64_t c = ct; c < c_end; ++c) {
            const int64_t k = col0 + c;
            for (int64_t r = rt; r < r_end; ++r)
              out[r * cols + c] = (Word(codes_, (k / 8) * n_ + row0 + r) >> (4 * (k % 8))) & 0xF;
          }
          break;
        case Int4Packing::kCompressedTensors: {  // weight_packed [N, ceil(K / 8)]
          const int64_t words = CeilDiv(k_, 8);
          for (int64_t r = rt; r < r_end; ++r)
            for (int64_t c = ct; c < c_end; ++c) {
              const int64_t k = col0 + c;
              out[r * cols + c] = (Word(codes_, (row0 + r) * words + k / 8) >> (4 * (k % 8))) & 0xF;
            }
          break;
        }
        case Int4Packing::kNone:
          break;
      }
    }
  }
}

}  // namespace llm
