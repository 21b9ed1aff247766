#include "engine/model/weights.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "engine/model/int4_checkpoint.h"
#include "engine/model/int4_repack.h"
#include "kernels/core/fp8_scale.h"

namespace llm {
namespace {

constexpr int64_t kScaleBlock = 128;  // rows and columns of one weight-scale block

// A rectangular piece of a checkpoint tensor, viewed as [rows, cols] (1-D tensors: one row),
// copied to a destination rows range at a column offset.
struct Piece {
  const TensorRecord* src = nullptr;
  int64_t src_row = 0, src_col = 0;
  int64_t rows = 0, cols = 0;
  int64_t dst_row = 0, dst_col = 0;
};

// One destination tensor of the shard: its dtype and shape, and how to fill it once the shard's
// memory is carved (planned first, so that the whole shard is one allocation).
struct Assembly {
  Tensor* dst = nullptr;
  DType dtype = DType::kF32;
  Shape shape;
  std::function<absl::Status(Tensor dst)> fill;
};

// One part of a linear layer: rows [src_row, src_row + rows) and columns [src_col, src_col +
// cols) of module `module`'s [src_n, src_k] weight, placed at destination rows from dst_row (the
// destination has `cols` columns). Fused projections have several parts; TP slices select rows
// (column-parallel) or columns (row-parallel).
struct LinearPart {
  std::string module;
  int64_t src_n = 0, src_k = 0;
  int64_t src_row = 0, rows = 0;
  int64_t src_col = 0, cols = 0;
  int64_t dst_row = 0;
};

// A linear as the checkpoint holds it, resolved against its quantization scheme.
struct LinearSource {
  std::string label;  // "layer 3 q/k/v projection"
  std::vector<LinearPart> parts;
  LinearScheme scheme;
  std::vector<const TensorRecord*> weights, scales, input_scales;  // one per part (scales: fp8 only)
  std::vector<std::unique_ptr<Int4Module>> int4;                   // one per part (4-bit checkpoints)
  // 4-bit: the repacking planned from them (or column order, for dummy weights).
  Int4Plan int4_plan;
  std::vector<Int4Part> int4_parts;
};

// The group size of 4-bit dummy weights (--dummy-weights with an int4 config or --quantization
// int4): the config's when the kernels' column order takes it, else 128, else 32.
int64_t DummyInt4GroupSize(int64_t k, int64_t wanted) {
  for (int64_t g : {wanted, int64_t{128}, int64_t{32}})
    if (g > 0 && g % 32 == 0 && k % g == 0) return g;
  return 0;
}

int64_t RecordCols(const TensorRecord& r) { return r.shape.size() == 2 ? r.shape[1] : r.numel(); }
int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Element `index` of a floating record, as float32 (scales may be stored in any float type).
float ReadFloat(const TensorRecord& r, int64_t index) {
  float v = 0.0f;
  ConvertToFloat(r.dtype, static_cast<const char*>(r.data) + index * DTypeSize(r.dtype), &v, 1);
  return v;
}

absl::Status WithScheme(const absl::Status& s, const LinearScheme& scheme) {
  if (s.ok() || scheme.description.empty()) return s;
  return absl::Status(s.code(), absl::StrCat(s.message(), " (quantization: ", scheme.description, ")"));
}

class Loader {
 public:
  Loader(const ModelConfig& c, const internal::WeightSource& source, const LoadOptions& options, const LocalDims& d,
         const ShardSpec& s, Backend& backend)
      : c_(c), source_(source), options_(options), d_(d), s_(s), backend_(backend) {}

  absl::StatusOr<std::unique_ptr<ModelWeights>> Run();

 private:
  absl::StatusOr<const TensorRecord*> Get(const std::string& name, std::vector<int64_t> shape,
                                          internal::TensorKind kind = internal::TensorKind::kFloat) {
    return source_.lookup(name, shape, kind);
  }
  // Float tensors of the activation dtype (norms, biases, embedding) assembled from pieces;
  // elements no piece covers are zero, or `fill_value` from `fill_from` on (vocab padding).
  void PlanFloat(Tensor* dst, Shape shape, std::vector<Piece> pieces, int64_t fill_from = -1, float fill_value = 0);
  // Whole tensor into `dst` of `shape`.
  absl::Status Whole(Tensor* dst, const std::string& name, std::vector<int64_t> shape) {
    ASSIGN_OR_RETURN(const TensorRecord* r, Get(name, shape));
    const int64_t rows = shape.size() == 2 ? shape[0] : 1;
    PlanFloat(dst, shape.size() == 1 ? Shape({shape[0]}) : Shape({shape[0], shape[1]}),
              {{r, 0, 0, rows, RecordCols(*r), 0, 0}});
    return absl::OkStatus();
  }
  absl::Status PlanLayer(int64_t layer, LayerWeights& w);
  absl::Status PlanVocab(Tensor* dst, const std::string& name);
  absl::Status PlanLinear(LinearWeight* w, std::string label, std::vector<LinearPart> parts, int64_t n, int64_t k);
  absl::StatusOr<LinearSource> ResolveLinear(std::string label, std::vector<LinearPart> parts);
  absl::StatusOr<StorageFormat> ChooseFormat(const LinearSource& src, bool online_fp8) const;
  // 4-bit linears: the repacked tensors, or their dequantized values where the backend takes no
  // int4 format.
  absl::Status PlanInt4(LinearWeight* w, std::shared_ptr<LinearSource> src, int64_t n, int64_t k);
  absl::Status FillInt4Dequantized(const LinearSource& src, Tensor dst);
  absl::Status LoadKvScales(int64_t layer, LayerWeights& w);

  // Fills: the scale every weight element of a part gets, per format.
  float OnlineRowScale(const LinearPart& part, const TensorRecord& r, int64_t local_row) const;
  absl::Status FillLinearWeight(const LinearSource& src, const StorageFormat& format, bool online_fp8, Tensor dst);
  absl::Status FillLinearScale(const LinearSource& src, const StorageFormat& format, bool online_fp8, Tensor dst);
  absl::Status Upload(const std::vector<float>& values, Tensor dst);

  const ModelConfig& c_;
  const internal::WeightSource& source_;
  const LoadOptions& options_;
  const LocalDims& d_;
  const ShardSpec& s_;
  Backend& backend_;
  std::vector<Assembly> plan_;
  std::vector<float> staging_;
  std::vector<uint8_t> bytes_;
};

void Loader::PlanFloat(Tensor* dst, Shape shape, std::vector<Piece> pieces, int64_t fill_from, float fill_value) {
  const std::string name = pieces.empty() ? std::string() : pieces.front().src->name;
  const int64_t fan_in = shape.rank() == 2 ? shape[1] : shape.numel();
  plan_.push_back({dst, backend_.activation_dtype(), shape, [=, this](Tensor t) -> absl::Status {
                     if (source_.fill && !pieces.empty()) return source_.fill(t, name, fan_in);
                     const int64_t dst_cols = shape.rank() == 2 ? shape[1] : shape.numel();
                     staging_.assign(shape.numel(), 0.0f);
                     if (fill_from >= 0) std::fill(staging_.begin() + fill_from, staging_.end(), fill_value);
                     for (const Piece& p : pieces) {
                       const int64_t src_cols = RecordCols(*p.src);
                       const size_t elem = DTypeSize(p.src->dtype);
                       for (int64_t r = 0; r < p.rows; ++r) {
                         const char* src =
                             static_cast<const char*>(p.src->data) + ((p.src_row + r) * src_cols + p.src_col) * elem;
                         ConvertToFloat(p.src->dtype, src, staging_.data() + (p.dst_row + r) * dst_cols + p.dst_col,
                                        p.cols);
                       }
                     }
                     return Upload(staging_, t);
                   }});
}

absl::Status Loader::Upload(const std::vector<float>& values, Tensor dst) {
  RETURN_IF_ERROR(backend_.UploadConverted(values.data(), DType::kF32, dst));
  return backend_.Synchronize();  // the staging is reused by the next tensor
}

absl::Status Loader::PlanVocab(Tensor* dst, const std::string& name) {
  ASSIGN_OR_RETURN(const TensorRecord* r, Get(name, {d_.vocab, d_.hidden}));
  const int64_t rows = std::max<int64_t>(0, std::min(d_.vocab, d_.vocab_offset + d_.vocab_local) - d_.vocab_offset);
  PlanFloat(dst, Shape({d_.vocab_local, d_.hidden}), {{r, d_.vocab_offset, 0, rows, d_.hidden, 0, 0}});
  return absl::OkStatus();
}

absl::StatusOr<LinearSource> Loader::ResolveLinear(std::string label, std::vector<LinearPart> parts) {
  LinearSource src;
  src.label = std::move(label);
  src.parts = std::move(parts);
  const QuantizationConfig& q = c_.quantization;
  src.scheme = q.SchemeFor(src.parts.front().module);
  for (const LinearPart& p : src.parts) {
    const LinearScheme s = q.SchemeFor(p.module);
    if (!s.SameStorage(src.scheme))
      return absl::InvalidArgumentError(absl::StrCat(
          src.label, ": '", src.parts.front().module, "' and '", p.module, "' are quantized differently (",
          src.scheme.description, " vs ", s.description, "); the parts of a fused projection need one scheme"));
  }
  const LinearScheme& s = src.scheme;
  if (s.int4 != Int4Packing::kNone) {
    if (source_.fill) return src;  // dummy weights: nothing to read
    for (const LinearPart& p : src.parts) {
      ASSIGN_OR_RETURN(Int4Module m, Int4Module::Resolve(source_.lookup, source_.exists, p.module, p.src_n, p.src_k, s));
      src.int4.push_back(std::make_unique<Int4Module>(std::move(m)));
    }
    return src;
  }
  for (const LinearPart& p : src.parts) {
    const std::string weight = p.module + ".weight";
    if (!s.fp8) {
      absl::StatusOr<const TensorRecord*> r = Get(weight, {p.src_n, p.src_k});
      RETURN_IF_ERROR(WithScheme(r.status(), s));
      src.weights.push_back(*r);
      continue;
    }
    absl::StatusOr<const TensorRecord*> r = Get(weight, {p.src_n, p.src_k}, internal::TensorKind::kFp8);
    RETURN_IF_ERROR(WithScheme(r.status(), s));
    src.weights.push_back(*r);
    std::vector<int64_t> scale_shape;
    switch (s.weight_scales) {
      case ScaleGranularity::kTensor: scale_shape = {}; break;
      case ScaleGranularity::kChannel: scale_shape = {p.src_n, 1}; break;
      case ScaleGranularity::kBlock:
        scale_shape = {CeilDiv(p.src_n, s.block_rows), CeilDiv(p.src_k, s.block_cols)};
        break;
      case ScaleGranularity::kGroup: scale_shape = {p.src_n, CeilDiv(p.src_k, s.block_cols)}; break;
      case ScaleGranularity::kNone:
      case ScaleGranularity::kChunkGroup:
        return absl::InternalError(absl::StrCat(src.label, ": FP8 scheme without FP8 weight scales"));
    }
    absl::StatusOr<const TensorRecord*> scale =
        Get(p.module + "." + s.scale_name, scale_shape, internal::TensorKind::kScale);
    RETURN_IF_ERROR(WithScheme(scale.status(), s));
    src.scales.push_back(*scale);
    if (s.activation == ActivationQuant::kStaticPerTensor) {
      absl::StatusOr<const TensorRecord*> in = Get(p.module + ".input_scale", {}, internal::TensorKind::kScale);
      RETURN_IF_ERROR(WithScheme(in.status(), s));
      src.input_scales.push_back(*in);
    }
  }
  return src;
}

absl::StatusOr<StorageFormat> Loader::ChooseFormat(const LinearSource& src, bool online_fp8) const {
  const LinearScheme& s = src.scheme;
  StorageFormat f;
  if (online_fp8) {
    f = StorageFormat::Fp8(ScaleGranularity::kChannel);
  } else if (!s.fp8) {
    // The checkpoint's own float type where the backend takes it (no conversion), else the
    // backend's activation dtype.
    const StorageFormat stored = StorageFormat::Float(src.weights.front()->dtype);
    return backend_.SupportsLinearFormat(stored) ? stored : StorageFormat::Float(backend_.activation_dtype());
  } else {
    switch (s.weight_scales) {
      case ScaleGranularity::kTensor: {
        bool same = true;  // fused parts with different scales: one per row, each its part's
        for (const TensorRecord* r : src.scales)
          same = same && (source_.fill || ReadFloat(*r, 0) == ReadFloat(*src.scales.front(), 0));
        f = StorageFormat::Fp8(same ? ScaleGranularity::kTensor : ScaleGranularity::kChannel);
        break;
      }
      case ScaleGranularity::kChannel:
        f = StorageFormat::Fp8(ScaleGranularity::kChannel);
        break;
      case ScaleGranularity::kBlock:
      case ScaleGranularity::kGroup: {
        bool blocks_aligned = s.weight_scales == ScaleGranularity::kBlock;
        for (const LinearPart& p : src.parts) {
          if (p.src_col % s.block_cols != 0)
            return absl::InvalidArgumentError(absl::StrCat(
                src.label, " ('", p.module, ".weight'): this tensor-parallel rank takes input columns [", p.src_col,
                ", ", p.src_col + p.cols, ") of ", p.src_k, ", which do not start on a ", s.block_cols,
                "-column boundary of its weight scales (", s.description,
                "); choose a tensor-parallel size that splits its ", p.src_k, " columns into multiples of ",
                s.block_cols));
          blocks_aligned = blocks_aligned && p.src_row % s.block_rows == 0 && p.dst_row % s.block_rows == 0;
        }
        f = blocks_aligned ? StorageFormat::Fp8(ScaleGranularity::kBlock, s.block_rows, s.block_cols)
                           : StorageFormat::Fp8(ScaleGranularity::kGroup, 0, s.block_cols);
        break;
      }
      case ScaleGranularity::kNone:
      case ScaleGranularity::kChunkGroup:
        return absl::InternalError("FP8 scheme without FP8 scales");
    }
  }
  if (!backend_.SupportsLinearFormat(f)) return StorageFormat::Float(backend_.activation_dtype());  // dequantized
  return f;
}

float Loader::OnlineRowScale(const LinearPart& part, const TensorRecord& r, int64_t local_row) const {
  // The whole checkpoint row, not only this rank's columns: every TP layout quantizes alike.
  const int64_t row = part.src_row + local_row;
  const size_t elem = DTypeSize(r.dtype);
  std::vector<float> values(part.src_k);
  ConvertToFloat(r.dtype, static_cast<const char*>(r.data) + row * part.src_k * elem, values.data(), part.src_k);
  float amax = 0.0f;
  for (float v : values) amax = std::max(amax, std::abs(v));
  return Fp8ScaleForAmax(amax);
}

// The scale of element (local row, local column) of a part, from the checkpoint's scales.
float CheckpointScale(const LinearSource& src, size_t part_index, int64_t local_row, int64_t local_col) {
  const LinearPart& p = src.parts[part_index];
  const TensorRecord& r = *src.scales[part_index];
  const LinearScheme& s = src.scheme;
  const int64_t row = p.src_row + local_row, col = p.src_col + local_col;
  switch (s.weight_scales) {
    case ScaleGranularity::kTensor: return ReadFloat(r, 0);
    case ScaleGranularity::kChannel: return ReadFloat(r, row);
    case ScaleGranularity::kBlock:
      return ReadFloat(r, (row / s.block_rows) * CeilDiv(p.src_k, s.block_cols) + col / s.block_cols);
    case ScaleGranularity::kGroup: return ReadFloat(r, row * CeilDiv(p.src_k, s.block_cols) + col / s.block_cols);
    case ScaleGranularity::kNone:
    case ScaleGranularity::kChunkGroup: break;
  }
  return 1.0f;
}

absl::Status Loader::FillLinearWeight(const LinearSource& src, const StorageFormat& format, bool online_fp8,
                                      Tensor dst) {
  const int64_t k = dst.dim(1);
  if (source_.fill) return source_.fill(dst, src.parts.front().module + ".weight", src.parts.front().src_k);
  if (format.element == DType::kF8E4M3) {
    bytes_.assign(static_cast<size_t>(dst.numel()), 0);
    for (size_t i = 0; i < src.parts.size(); ++i) {
      const LinearPart& p = src.parts[i];
      const TensorRecord& r = *src.weights[i];
      for (int64_t row = 0; row < p.rows; ++row) {
        uint8_t* out = bytes_.data() + (p.dst_row + row) * k;
        const int64_t at = (p.src_row + row) * p.src_k + p.src_col;
        if (!online_fp8) {  // the checkpoint's bytes, as stored
          std::memcpy(out, static_cast<const uint8_t*>(r.data) + at, p.cols);
          continue;
        }
        const float scale = OnlineRowScale(p, r, row);
        staging_.resize(p.cols);
        ConvertToFloat(r.dtype, static_cast<const char*>(r.data) + at * DTypeSize(r.dtype), staging_.data(), p.cols);
        for (int64_t c = 0; c < p.cols; ++c) out[c] = FloatToFp8E4M3(staging_[c] / scale);
      }
    }
    RETURN_IF_ERROR(backend_.CopyToDevice(dst, bytes_.data()));
    return backend_.Synchronize();
  }
  // Float storage: float checkpoint rows, or FP8 ones dequantized (element * scale).
  staging_.assign(static_cast<size_t>(dst.numel()), 0.0f);
  for (size_t i = 0; i < src.parts.size(); ++i) {
    const LinearPart& p = src.parts[i];
    const TensorRecord& r = *src.weights[i];
    for (int64_t row = 0; row < p.rows; ++row) {
      float* out = staging_.data() + (p.dst_row + row) * k;
      const int64_t at = (p.src_row + row) * p.src_k + p.src_col;
      ConvertToFloat(r.dtype, static_cast<const char*>(r.data) + at * DTypeSize(r.dtype), out, p.cols);
      if (src.scheme.fp8)
        for (int64_t c = 0; c < p.cols; ++c) out[c] *= CheckpointScale(src, i, row, c);
    }
  }
  return Upload(staging_, dst);
}

absl::Status Loader::FillLinearScale(const LinearSource& src, const StorageFormat& format, bool online_fp8,
                                     Tensor dst) {
  const LinearPart& first = src.parts.front();
  if (source_.fill) return source_.fill(dst, first.module + "." + src.scheme.scale_name, first.src_k);
  const int64_t n = src.parts.back().dst_row + src.parts.back().rows, k = first.cols;
  const ScaleGrid grid = ScaleGridFor(format, n, k);
  staging_.assign(static_cast<size_t>(grid.numel()), 0.0f);
  for (size_t i = 0; i < src.parts.size(); ++i) {
    const LinearPart& p = src.parts[i];
    switch (format.granularity) {
      case ScaleGranularity::kTensor:
        staging_[0] = CheckpointScale(src, i, 0, 0);
        break;
      case ScaleGranularity::kChannel:
        for (int64_t row = 0; row < p.rows; ++row)
          staging_[p.dst_row + row] =
              online_fp8 ? OnlineRowScale(p, *src.weights[i], row) : CheckpointScale(src, i, row, 0);
        break;
      case ScaleGranularity::kBlock:  // whole blocks: the part's rows and columns start on block boundaries
        for (int64_t row = 0; row < p.rows; row += format.block_rows)
          for (int64_t col = 0; col < p.cols; col += format.block_cols)
            staging_[grid.Index(p.dst_row + row, col)] = CheckpointScale(src, i, row, col);
        break;
      case ScaleGranularity::kGroup:
        for (int64_t row = 0; row < p.rows; ++row)
          for (int64_t col = 0; col < p.cols; col += format.block_cols)
            staging_[grid.Index(p.dst_row + row, col)] = CheckpointScale(src, i, row, col);
        break;
      case ScaleGranularity::kNone:
      case ScaleGranularity::kChunkGroup:  // int4: PlanInt4
        break;
    }
  }
  return Upload(staging_, dst);
}

absl::Status Loader::PlanInt4(LinearWeight* w, std::shared_ptr<LinearSource> src, int64_t n, int64_t k) {
  const LinearScheme& s = src->scheme;
  if (source_.fill) {
    const int64_t g = DummyInt4GroupSize(k, s.group_size);
    if (g == 0)
      return absl::InvalidArgumentError(absl::StrCat(src->label, ": 4-bit dummy weights need input columns (", k,
                                                     ") in whole groups of a multiple of 32"));
    src->int4_plan = ColumnOrderInt4Plan(n, k, g, /*zero_points=*/false);
  } else {
    for (size_t i = 0; i < src->parts.size(); ++i) {
      const LinearPart& p = src->parts[i];
      src->int4_parts.push_back({src->int4[i].get(), p.src_row, p.rows, p.src_col, p.cols, p.dst_row});
    }
    ASSIGN_OR_RETURN(src->int4_plan, PlanInt4Linear(src->label, src->int4_parts));
  }
  const Int4Plan& plan = src->int4_plan;
  // Float32 scales where the backend takes them (exact for any checkpoint), else float16.
  StorageFormat format = StorageFormat::Int4(plan.zero_points, DType::kF32);
  if (!backend_.SupportsLinearFormat(format)) format.scale_dtype = DType::kF16;
  if (!backend_.SupportsLinearFormat(format)) {  // dequantized into the activation dtype
    if (source_.fill)
      return absl::UnimplementedError(absl::StrCat(src->label, ": this backend takes no 4-bit weights"));
    w->format = StorageFormat::Float(backend_.activation_dtype());
    plan_.push_back({&w->weight, w->format.element, Shape({n, k}),
                     [=, this](Tensor t) { return FillInt4Dequantized(*src, t); }});
    return absl::OkStatus();
  }
  w->format = format;
  w->int4_in_features = k;
  w->int4_group_chunks = Int4GroupChunks(plan.chunk_group.data(), static_cast<int64_t>(plan.chunk_group.size()));
  const std::string& module = src->parts.front().module;
  plan_.push_back({&w->weight, DType::kU8, Shape({n, plan.kp / 2}), [=, this](Tensor t) -> absl::Status {
                     if (source_.fill) return source_.fill(t, module + ".int4_codes", k);
                     bytes_.resize(static_cast<size_t>(t.numel()));
                     FillInt4Codes(src->int4_plan, src->int4_parts, bytes_.data());
                     RETURN_IF_ERROR(backend_.CopyToDevice(t, bytes_.data()));
                     return backend_.Synchronize();
                   }});
  plan_.push_back({&w->scale, format.scale_dtype, Shape({n, plan.groups}), [=, this](Tensor t) -> absl::Status {
                     if (source_.fill) return source_.fill(t, module + ".int4_scales", k);
                     bytes_.resize(t.bytes());
                     FillInt4Scales(src->int4_plan, src->int4_parts, t.dtype(), bytes_.data());
                     RETURN_IF_ERROR(backend_.CopyToDevice(t, bytes_.data()));
                     return backend_.Synchronize();
                   }});
  if (plan.zero_points) {
    plan_.push_back({&w->zero, DType::kU8, Shape({n, plan.groups}), [=, this](Tensor t) -> absl::Status {
                       bytes_.resize(t.bytes());
                       FillInt4Zeros(src->int4_plan, src->int4_parts, bytes_.data());
                       RETURN_IF_ERROR(backend_.CopyToDevice(t, bytes_.data()));
                       return backend_.Synchronize();
                     }});
  }
  plan_.push_back({&w->chunk_group, DType::kI32, Shape({plan.kp / 32}), [=, this](Tensor t) -> absl::Status {
                     RETURN_IF_ERROR(backend_.CopyToDevice(t, src->int4_plan.chunk_group.data()));
                     return backend_.Synchronize();
                   }});
  if (!plan.input_perm.empty()) {
    plan_.push_back({&w->input_perm, DType::kI32, Shape({plan.kp}), [=, this](Tensor t) -> absl::Status {
                       RETURN_IF_ERROR(backend_.CopyToDevice(t, src->int4_plan.input_perm.data()));
                       return backend_.Synchronize();
                     }});
  }
  return absl::OkStatus();
}

// The repacked values, dequantized on the host and put back in input-column order (the same
// values a backend that takes int4 computes with, at float32 scales).
absl::Status Loader::FillInt4Dequantized(const LinearSource& src, Tensor dst) {
  const Int4Plan& plan = src.int4_plan;
  std::vector<uint8_t> codes(static_cast<size_t>(plan.n * plan.kp / 2));
  std::vector<float> scales(static_cast<size_t>(plan.n * plan.groups));
  std::vector<uint8_t> zeros(plan.zero_points ? scales.size() : 0);
  FillInt4Codes(plan, src.int4_parts, codes.data());
  FillInt4Scales(plan, src.int4_parts, DType::kF32, scales.data());
  if (plan.zero_points) FillInt4Zeros(plan, src.int4_parts, zeros.data());
  Int4View v;
  v.weight = codes.data();
  v.scale = scales.data();
  v.zero = plan.zero_points ? zeros.data() : nullptr;
  v.chunk_group = plan.chunk_group.data();
  v.input_perm = plan.input_perm.empty() ? nullptr : plan.input_perm.data();
  v.n = plan.n;
  v.k = plan.k;
  v.kp = plan.kp;
  v.groups = plan.groups;
  staging_.resize(static_cast<size_t>(plan.n * plan.k));
  DequantizeInt4(v, staging_.data());
  return Upload(staging_, dst);
}

absl::Status Loader::PlanLinear(LinearWeight* w, std::string label, std::vector<LinearPart> parts, int64_t n,
                                int64_t k) {
  ASSIGN_OR_RETURN(LinearSource resolved, ResolveLinear(std::move(label), std::move(parts)));
  if (resolved.scheme.int4 == Int4Packing::kNone && options_.quantization == OnlineQuantization::kInt4) {
    if (!source_.fill)
      return absl::UnimplementedError(absl::StrCat(
          resolved.label, ": --quantization int4 makes 4-bit dummy weights only; quantize a checkpoint with "
                          "tools/w4a16/quantize.py (AutoAWQ, GPTQ or compressed-tensors layouts)"));
    resolved.scheme.int4 = Int4Packing::kGptq;  // any packing: dummy weights read none
    resolved.scheme.group_size = 128;
  }
  if (resolved.scheme.int4 != Int4Packing::kNone)
    return PlanInt4(w, std::make_shared<LinearSource>(std::move(resolved)), n, k);
  auto src = std::make_shared<const LinearSource>(std::move(resolved));
  const bool online_fp8 = !src->scheme.fp8 && options_.quantization == OnlineQuantization::kFp8;
  ASSIGN_OR_RETURN(const StorageFormat format, ChooseFormat(*src, online_fp8));
  const bool fp8 = format.element == DType::kF8E4M3;
  w->format = format;
  plan_.push_back({&w->weight, format.element, Shape({n, k}), [=, this](Tensor t) {
                     return FillLinearWeight(*src, format, online_fp8, t);
                   }});
  if (!fp8) return absl::OkStatus();  // float, or FP8 dequantized for this backend
  const ScaleGrid grid = ScaleGridFor(format, n, k);
  plan_.push_back({&w->scale, DType::kF32, Shape({grid.rows, grid.cols}), [=, this](Tensor t) {
                     return FillLinearScale(*src, format, online_fp8, t);
                   }});
  w->input_quant = online_fp8 ? ActivationQuant::kDynamicPerToken : src->scheme.activation;
  w->input_group = src->scheme.activation_group;
  if (w->input_quant == ActivationQuant::kStaticPerTensor) {
    plan_.push_back({&w->input_scale, DType::kF32, Shape({1}), [=, this](Tensor t) -> absl::Status {
                       if (source_.fill) return source_.fill(t, src->parts.front().module + ".input_scale", k);
                       float largest = 0.0f;
                       for (const TensorRecord* r : src->input_scales) largest = std::max(largest, ReadFloat(*r, 0));
                       staging_.assign(1, largest);
                       return Upload(staging_, t);
                     }});
  }
  return absl::OkStatus();
}

absl::Status Loader::LoadKvScales(int64_t layer, LayerWeights& w) {
  // Where the published layouts keep them: ModelOpt on the projections, compressed-tensors and
  // llm-compressor on the attention module, AutoFP8 as the projections' output scales.
  const std::string a = absl::StrCat("model.layers.", layer, ".self_attn.");
  const std::string k_names[] = {a + "k_proj.k_scale", a + "k_scale", a + "k_proj.output_scale", a + "attn.k_scale"};
  const std::string v_names[] = {a + "v_proj.v_scale", a + "v_scale", a + "v_proj.output_scale", a + "attn.v_scale"};
  const std::string* k_name = nullptr;
  const std::string* v_name = nullptr;
  for (const std::string& n : k_names)
    if (!k_name && source_.exists(n)) k_name = &n;
  for (const std::string& n : v_names)
    if (!v_name && source_.exists(n)) v_name = &n;
  if (!k_name || !v_name) {
    if (c_.quantization.kv_cache_fp8)
      return absl::NotFoundError(absl::StrCat("layer ", layer, ": ", c_.quantization.source,
                                              " declares an FP8 KV cache, but the checkpoint has no '",
                                              k_name ? v_names[0] : k_names[0], "' (nor '",
                                              k_name ? v_names[1] : k_names[1], "')"));
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(const TensorRecord* k, Get(*k_name, {}, internal::TensorKind::kScale));
  ASSIGN_OR_RETURN(const TensorRecord* v, Get(*v_name, {}, internal::TensorKind::kScale));
  w.k_scale = ReadFloat(*k, 0);
  w.v_scale = ReadFloat(*v, 0);
  if (!(w.k_scale > 0 && w.v_scale > 0 && std::isfinite(w.k_scale) && std::isfinite(w.v_scale)))
    return absl::InvalidArgumentError(absl::StrCat("KV cache scales '", *k_name, "' (", w.k_scale, ") and '",
                                                   *v_name, "' (", w.v_scale, ") must be positive and finite"));
  w.has_kv_scales = true;
  return absl::OkStatus();
}

absl::Status Loader::PlanLayer(int64_t layer, LayerWeights& w) {
  const std::string p = absl::StrCat("model.layers.", layer, ".");
  const int64_t h = d_.hidden, hd = d_.head_dim;
  const int64_t q_rows = d_.num_heads * hd, kv_rows = d_.num_kv_heads * hd;
  const int64_t q_full = c_.num_heads * hd, kv_full = c_.num_kv_heads * hd;
  // KV heads: split when there are at least as many as ranks, else replicate.
  const int64_t kv_first_head = c_.num_kv_heads >= s_.tp_size
                                    ? s_.tp_rank * d_.num_kv_heads
                                    : s_.tp_rank / (s_.tp_size / c_.num_kv_heads);
  const int64_t q_first = s_.tp_rank * q_rows, kv_first = kv_first_head * hd;

  RETURN_IF_ERROR(Whole(&w.input_norm, p + "input_layernorm.weight", {h}));
  RETURN_IF_ERROR(Whole(&w.post_attention_norm, p + "post_attention_layernorm.weight", {h}));

  // Fused QKV, column-parallel.
  const std::string a = p + "self_attn.";
  RETURN_IF_ERROR(PlanLinear(&w.qkv, absl::StrCat("layer ", layer, " q/k/v projection"),
                             {{a + "q_proj", q_full, h, q_first, q_rows, 0, h, 0},
                              {a + "k_proj", kv_full, h, kv_first, kv_rows, 0, h, q_rows},
                              {a + "v_proj", kv_full, h, kv_first, kv_rows, 0, h, q_rows + kv_rows}},
                             q_rows + 2 * kv_rows, h));
  if (c_.qkv_bias) {
    ASSIGN_OR_RETURN(auto* qb, Get(a + "q_proj.bias", {q_full}));
    ASSIGN_OR_RETURN(auto* kb, Get(a + "k_proj.bias", {kv_full}));
    ASSIGN_OR_RETURN(auto* vb, Get(a + "v_proj.bias", {kv_full}));
    PlanFloat(&w.qkv.bias, Shape({q_rows + 2 * kv_rows}),
              {{qb, 0, q_first, 1, q_rows, 0, 0},
               {kb, 0, kv_first, 1, kv_rows, 0, q_rows},
               {vb, 0, kv_first, 1, kv_rows, 0, q_rows + kv_rows}});
  }
  if (c_.qk_norm) {
    RETURN_IF_ERROR(Whole(&w.q_norm, a + "q_norm.weight", {hd}));
    RETURN_IF_ERROR(Whole(&w.k_norm, a + "k_norm.weight", {hd}));
  }
  // o_proj, row-parallel: this rank's input columns; the bias once (rank 0), after the sum.
  RETURN_IF_ERROR(PlanLinear(&w.o_proj, absl::StrCat("layer ", layer, " o_proj"),
                             {{a + "o_proj", h, q_full, 0, h, q_first, q_rows, 0}}, h, q_rows));
  if (c_.o_bias && s_.tp_rank == 0) RETURN_IF_ERROR(Whole(&w.o_proj.bias, a + "o_proj.bias", {h}));

  // Fused gate/up, column-parallel; down, row-parallel.
  const std::string m = p + "mlp.";
  const int64_t f = d_.ffn, f_first = s_.tp_rank * f, ffn = c_.intermediate_size;
  RETURN_IF_ERROR(PlanLinear(&w.gate_up, absl::StrCat("layer ", layer, " gate/up projection"),
                             {{m + "gate_proj", ffn, h, f_first, f, 0, h, 0}, {m + "up_proj", ffn, h, f_first, f, 0, h, f}},
                             2 * f, h));
  RETURN_IF_ERROR(PlanLinear(&w.down, absl::StrCat("layer ", layer, " down_proj"),
                             {{m + "down_proj", h, ffn, 0, h, f_first, f, 0}}, h, f));
  if (c_.mlp_bias) {
    ASSIGN_OR_RETURN(auto* gb, Get(m + "gate_proj.bias", {ffn}));
    ASSIGN_OR_RETURN(auto* ub, Get(m + "up_proj.bias", {ffn}));
    PlanFloat(&w.gate_up.bias, Shape({2 * f}), {{gb, 0, f_first, 1, f, 0, 0}, {ub, 0, f_first, 1, f, 0, f}});
    if (s_.tp_rank == 0) RETURN_IF_ERROR(Whole(&w.down.bias, m + "down_proj.bias", {h}));
  }
  return LoadKvScales(layer, w);
}

absl::StatusOr<std::unique_ptr<ModelWeights>> Loader::Run() {
  auto weights = std::make_unique<ModelWeights>();
  ModelWeights& w = *weights;
  w.layers.resize(d_.end_layer - d_.first_layer);
  const bool need_embedding = d_.is_first_stage || (d_.is_last_stage && c_.tie_word_embeddings);
  if (need_embedding) RETURN_IF_ERROR(PlanVocab(&w.embedding, "model.embed_tokens.weight"));
  for (int64_t l = d_.first_layer; l < d_.end_layer; ++l) RETURN_IF_ERROR(PlanLayer(l, w.layers[l - d_.first_layer]));
  if (d_.is_last_stage) {
    RETURN_IF_ERROR(Whole(&w.final_norm, "model.norm.weight", {d_.hidden}));
    if (!c_.tie_word_embeddings) {
      // The LM head stays in floats: an FP8 one (a checkpoint that quantized it) is refused by name.
      for (const char* packed : {"lm_head.qweight", "lm_head.weight_packed"})
        if (!source_.fill && source_.exists(packed) && !source_.exists("lm_head.weight"))
          return absl::UnimplementedError(absl::StrCat(
              "tensor '", packed, "': a 4-bit LM head is not supported; the LM head must be stored in bf16, fp16 "
              "or fp32 (quantization: ", c_.quantization.SchemeFor("lm_head").description, ")"));
      ASSIGN_OR_RETURN(const TensorRecord* head, Get("lm_head.weight", {d_.vocab, d_.hidden}, internal::TensorKind::kAny));
      if (head->dtype == DType::kF8E4M3)
        return absl::UnimplementedError(absl::StrCat(
            "tensor 'lm_head.weight' is F8_E4M3 (quantization: ", c_.quantization.SchemeFor("lm_head").description,
            "): an FP8 LM head is not supported; the LM head must be stored in bf16, fp16 or fp32 (list "
            "lm_head in the quantization config's ignore / exclude_modules)"));
      RETURN_IF_ERROR(PlanVocab(&w.lm_head.weight, "lm_head.weight"));
    }
    w.lm_head.format = StorageFormat::Float(backend_.activation_dtype());
    // A vocabulary that does not split evenly over TP ranks is padded; the padded rows' logits
    // are pushed to -1e30 so that no sampler can ever pick them.
    const int64_t valid = std::max<int64_t>(0, std::min(d_.vocab_local, d_.vocab - d_.vocab_offset));
    if (valid < d_.vocab_local) PlanFloat(&w.lm_head.bias, Shape({d_.vocab_local}), {}, valid, -1e30f);
  }

  // One allocation for the whole shard, then each tensor filled (staged on the host, uploaded).
  constexpr size_t kAlign = 256;
  size_t total = 0;
  for (const Assembly& a : plan_) total = (total + kAlign - 1) / kAlign * kAlign + a.shape.numel() * DTypeSize(a.dtype);
  ASSIGN_OR_RETURN(Buffer memory, backend_.Allocate(total));
  Arena arena(std::move(memory));
  for (Assembly& a : plan_) {
    ASSIGN_OR_RETURN(*a.dst, arena.Take(a.dtype, a.shape, kAlign));
    RETURN_IF_ERROR(a.fill(*a.dst));
  }
  RETURN_IF_ERROR(backend_.Synchronize());
  staging_ = {};
  bytes_ = {};
  if (d_.is_last_stage && c_.tie_word_embeddings) w.lm_head.weight = w.embedding;
  w.bytes = arena.used();
  // The arena's buffer must outlive the views: move it into the weights.
  w.memory = std::move(arena).Release();
  return weights;
}

}  // namespace

absl::StatusOr<OnlineQuantization> ParseOnlineQuantization(std::string_view name) {
  const std::string n = absl::AsciiStrToLower(std::string(name));
  if (n.empty() || n == "none") return OnlineQuantization::kNone;
  if (n == "fp8") return OnlineQuantization::kFp8;
  if (n == "int4" || n == "w4a16") return OnlineQuantization::kInt4;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown quantization '", std::string(name), "' (none, fp8 or int4)"));
}

absl::StatusOr<LocalDims> ComputeLocalDims(const ModelConfig& c, const ShardSpec& s) {
  LocalDims d;
  const int64_t tp = s.tp_size;
  if (tp < 1 || s.tp_rank < 0 || s.tp_rank >= tp) return absl::InvalidArgumentError("bad tensor-parallel rank");
  if (c.num_heads % tp != 0)
    return absl::InvalidArgumentError(
        absl::StrCat("num_attention_heads (", c.num_heads, ") is not divisible by tensor parallelism ", tp));
  if (c.num_kv_heads >= tp ? c.num_kv_heads % tp != 0 : tp % c.num_kv_heads != 0)
    return absl::InvalidArgumentError(absl::StrCat("num_key_value_heads (", c.num_kv_heads,
                                                   ") and tensor parallelism ", tp,
                                                   " must divide one another"));
  if (c.intermediate_size % tp != 0)
    return absl::InvalidArgumentError(
        absl::StrCat("intermediate_size (", c.intermediate_size, ") is not divisible by tensor parallelism ", tp));
  d.hidden = c.hidden_size;
  d.head_dim = c.head_dim;
  d.num_heads = c.num_heads / tp;
  d.num_kv_heads = std::max<int64_t>(1, c.num_kv_heads / tp);
  d.ffn = c.intermediate_size / tp;
  d.vocab = c.vocab_size;
  d.vocab_local = (c.vocab_size + tp - 1) / tp;
  d.vocab_offset = s.tp_rank * d.vocab_local;
  d.first_layer = s.first_layer;
  d.end_layer = s.end_layer < 0 ? c.num_layers : s.end_layer;
  if (d.first_layer < 0 || d.first_layer >= d.end_layer || d.end_layer > c.num_layers)
    return absl::InvalidArgumentError(absl::StrCat("bad layer range [", d.first_layer, ", ", d.end_layer,
                                                   ") for a model of ", c.num_layers, " layers"));
  d.is_first_stage = d.first_layer == 0;
  d.is_last_stage = d.end_layer == c.num_layers;
  return d;
}

absl::StatusOr<std::unique_ptr<ModelWeights>> LoadWeights(const ModelConfig& config, const Checkpoint& checkpoint,
                                                          const ShardSpec& shard, Backend& backend,
                                                          const LoadOptions& options) {
  internal::WeightSource source;
  source.lookup = [&](const std::string& name, const std::vector<int64_t>& shape,
                      internal::TensorKind kind) -> absl::StatusOr<const TensorRecord*> {
    switch (kind) {
      case internal::TensorKind::kFloat: return checkpoint.FindFloat(name, shape);
      case internal::TensorKind::kFp8: return checkpoint.FindFp8(name, shape);
      case internal::TensorKind::kScale: return checkpoint.FindScale(name, shape);
      case internal::TensorKind::kAny: return checkpoint.Find(name);
      case internal::TensorKind::kI32: return checkpoint.FindTyped(name, shape, DType::kI32);
      case internal::TensorKind::kI64: return checkpoint.FindTyped(name, shape, DType::kI64);
    }
    return absl::InternalError("unknown tensor kind");
  };
  source.exists = [&](const std::string& name) { return checkpoint.Contains(name); };
  return internal::BuildWeights(config, shard, backend, source, options);
}

namespace internal {

absl::StatusOr<std::unique_ptr<ModelWeights>> BuildWeights(const ModelConfig& config, const ShardSpec& shard,
                                                           Backend& backend, const WeightSource& source,
                                                           const LoadOptions& options) {
  ASSIGN_OR_RETURN(LocalDims dims, ComputeLocalDims(config, shard));
  Loader loader(config, source, options, dims, shard, backend);
  return loader.Run();
}

}  // namespace internal

}  // namespace llm
