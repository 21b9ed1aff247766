#include "engine/core/storage_format.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace llm {

std::string_view ScaleGranularityName(ScaleGranularity g) {
  switch (g) {
    case ScaleGranularity::kNone: return "none";
    case ScaleGranularity::kTensor: return "tensor";
    case ScaleGranularity::kChannel: return "channel";
    case ScaleGranularity::kBlock: return "block";
    case ScaleGranularity::kGroup: return "group";
    case ScaleGranularity::kChunkGroup: return "chunk group";
  }
  return "unknown";
}

std::string StorageFormat::ToString() const {
  const std::string e(DTypeName(element));
  switch (granularity) {
    case ScaleGranularity::kNone: return e;
    case ScaleGranularity::kTensor: return e + " per-tensor";
    case ScaleGranularity::kChannel: return e + " per-channel";
    case ScaleGranularity::kBlock: return absl::StrCat(e, " ", block_rows, "x", block_cols, " blocks");
    case ScaleGranularity::kGroup: return absl::StrCat(e, " per-row groups of ", block_cols);
    case ScaleGranularity::kChunkGroup:
      return absl::StrCat(e, " per-row groups (", std::string(DTypeName(scale_dtype)), " scales",
                          zero_points ? ", zero points)" : ", zero 8)");
  }
  return e;
}

ScaleGrid ScaleGridFor(const StorageFormat& f, int64_t n, int64_t k) {
  ScaleGrid g;
  const auto ceil_div = [](int64_t a, int64_t b) { return b > 0 ? (a + b - 1) / b : 0; };
  switch (f.granularity) {
    case ScaleGranularity::kNone:
      return g;
    case ScaleGranularity::kTensor:
      g.rows = g.cols = 1;
      g.rows_per = std::max<int64_t>(n, 1);
      g.cols_per = std::max<int64_t>(k, 1);
      return g;
    case ScaleGranularity::kChannel:
      g.rows = n;
      g.cols = 1;
      g.cols_per = std::max<int64_t>(k, 1);
      return g;
    case ScaleGranularity::kBlock:
      g.rows = ceil_div(n, f.block_rows);
      g.cols = ceil_div(k, f.block_cols);
      g.rows_per = f.block_rows;
      g.cols_per = f.block_cols;
      return g;
    case ScaleGranularity::kGroup:
      g.rows = n;
      g.cols = ceil_div(k, f.block_cols);
      g.cols_per = f.block_cols;
      return g;
    case ScaleGranularity::kChunkGroup:
      return g;
  }
  return g;
}

std::string_view ActivationQuantName(ActivationQuant q) {
  switch (q) {
    case ActivationQuant::kNone: return "none (weight-only)";
    case ActivationQuant::kDynamicPerToken: return "dynamic per token";
    case ActivationQuant::kStaticPerTensor: return "static per tensor";
    case ActivationQuant::kDynamicPerGroup: return "dynamic per token and column group";
  }
  return "unknown";
}

}  // namespace llm
