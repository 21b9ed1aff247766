#include "engine/core/int4_layout.h"

#include <cstring>

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"

namespace llm {

float Int4View::Scale(int64_t row, int64_t group) const {
  const int64_t i = row * groups + group;
  if (scale_dtype == DType::kF16) return Fp16ToFloat(static_cast<const uint16_t*>(scale)[i]);
  return static_cast<const float*>(scale)[i];
}

Int4View MakeInt4View(const Tensor& weight, const Tensor& scale, const Tensor& zero, const Tensor& chunk_group,
                      const Tensor& input_perm, int64_t k) {
  Int4View v;
  v.weight = weight.data_as<const uint8_t>();
  v.scale = scale.data();
  v.scale_dtype = scale.dtype();
  v.zero = zero.empty() ? nullptr : zero.data_as<const uint8_t>();
  v.chunk_group = chunk_group.data_as<const int32_t>();
  v.input_perm = input_perm.empty() ? nullptr : input_perm.data_as<const int32_t>();
  v.n = weight.dim(0);
  v.k = k;
  v.kp = weight.dim(1) * 2;
  v.groups = scale.rank() == 2 ? scale.dim(1) : 0;
  return v;
}

absl::Status ValidateInt4(const StorageFormat& f, const Tensor& weight, const Tensor& scale, const Tensor& zero,
                          const Tensor& chunk_group, const Tensor& input_perm, int64_t k, const char* op) {
  auto fail = [&](const std::string& what) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": int4 weight ", weight.shape().ToString(), ": ", what));
  };
  if (!f.int4()) return fail("not an int4 format");
  if (weight.dtype() != DType::kU8 || weight.rank() != 2) return fail("codes must be u8 [N, Kp / 2]");
  const int64_t n = weight.dim(0), kp = weight.dim(1) * 2;
  if (kp % kInt4Chunk != 0) return fail(absl::StrCat("storage columns ", kp, " are not whole chunks of 32"));
  if (scale.dtype() != f.scale_dtype || (f.scale_dtype != DType::kF32 && f.scale_dtype != DType::kF16) ||
      scale.rank() != 2 || scale.dim(0) != n || scale.dim(1) < 1)
    return fail(absl::StrCat("scales ", scale.shape().ToString(), " of ", std::string(DTypeName(scale.dtype())),
                             " for a format of ", f.ToString()));
  const int64_t groups = scale.dim(1);
  if (f.zero_points != !zero.empty() || (!zero.empty() && (zero.dtype() != DType::kU8 || !(zero.shape() == scale.shape()))))
    return fail(absl::StrCat("zero points ", zero.shape().ToString(), " for ", f.ToString()));
  if (chunk_group.dtype() != DType::kI32 || chunk_group.numel() != kp / kInt4Chunk)
    return fail(absl::StrCat("chunk groups ", chunk_group.shape().ToString(), " for ", kp, " storage columns"));
  if (input_perm.empty() ? k != kp : (input_perm.dtype() != DType::kI32 || input_perm.numel() != kp || k > kp))
    return fail(absl::StrCat(k, " input columns, ", kp, " storage columns and a permutation of ",
                             input_perm.numel()));
  // Host tensors only: device ones are checked by their shapes above.
  if (chunk_group.device().kind == DeviceKind::kCpu) {
    const int32_t* cg = chunk_group.data_as<const int32_t>();
    for (int64_t c = 0; c < kp / kInt4Chunk; ++c)
      if (cg[c] < 0 || cg[c] >= groups) return fail(absl::StrCat("chunk ", c, " names group ", cg[c], " of ", groups));
    if (!input_perm.empty()) {
      const int32_t* p = input_perm.data_as<const int32_t>();
      for (int64_t j = 0; j < kp; ++j)
        if (p[j] < -1 || p[j] >= k) return fail(absl::StrCat("storage column ", j, " reads input column ", p[j]));
    }
  }
  return absl::OkStatus();
}

void DequantizeInt4StorageRow(const Int4View& w, int64_t row, float* out) {
  const Int4Layout layout{w.n, w.kp};
  for (int64_t c0 = 0; c0 < w.kp; c0 += kInt4Chunk) {
    const int64_t g = w.chunk_group[c0 / kInt4Chunk];
    const float s = w.Scale(row, g);
    const int z = w.Zero(row, g);
    const uint8_t* chunk = w.weight + layout.ChunkOffset(row, c0 / kInt4Chunk);
    for (int64_t c = 0; c < kInt4Chunk; ++c) {
      const int64_t j = c0 + c;
      const bool pad = w.input_perm != nullptr && w.input_perm[j] < 0;
      const int code = (chunk[Int4Layout::ByteInChunk(c)] >> Int4Layout::ShiftOf(c)) & 0xF;
      // (code - zero) is a small integer and the scale has at most 24 significant bits: exact.
      out[j] = pad ? 0.0f : static_cast<float>(code - z) * s;
    }
  }
}

void DequantizeInt4(const Int4View& w, float* out) {
  std::vector<float> row(static_cast<size_t>(w.kp));
  for (int64_t r = 0; r < w.n; ++r) {
    DequantizeInt4StorageRow(w, r, row.data());
    float* dst = out + r * w.k;
    if (w.input_perm == nullptr) {
      std::memcpy(dst, row.data(), w.k * sizeof(float));
      continue;
    }
    std::fill(dst, dst + w.k, 0.0f);
    for (int64_t j = 0; j < w.kp; ++j)
      if (w.input_perm[j] >= 0) dst[w.input_perm[j]] = row[j];
  }
}

}  // namespace llm
