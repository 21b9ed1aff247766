#include "engine/backend/cpu/cpu_backend.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"

namespace llm {
namespace {

absl::Status Expect(bool ok, const char* op, const std::string& what) {
  if (ok) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(op, ": ", what));
}

absl::Status ExpectF32(const char* op, std::initializer_list<const Tensor*> ts) {
  for (const Tensor* t : ts) {
    if (t->empty()) continue;
    if (t->dtype() != DType::kF32 || t->device().kind != DeviceKind::kCpu)
      return absl::InvalidArgumentError(absl::StrCat(op, ": expected float32 host tensors, got ",
                                                     std::string(DTypeName(t->dtype()))));
  }
  return absl::OkStatus();
}

int DefaultThreads(int n) {
  if (n > 0) return n;
  return std::max(1u, std::thread::hardware_concurrency());
}

}  // namespace

CpuBackend::CpuBackend(int num_threads) : CpuBackend(CpuBackendOptions{num_threads}) {}

CpuBackend::CpuBackend(const CpuBackendOptions& options)
    : options_(options), pool_(DefaultThreads(options.num_threads)) {}

bool CpuBackend::SupportsLinearFormat(const StorageFormat& f) const {
  if (f == StorageFormat::Float(DType::kF32)) return true;
  if (f.int4())
    return f == StorageFormat::Int4(f.zero_points, DType::kF16) ||
           (!options_.int4_fp16_scales && f == StorageFormat::Int4(f.zero_points, DType::kF32));
  if (f.element != DType::kF8E4M3) return false;
  switch (f.granularity) {
    case ScaleGranularity::kNone: return false;
    case ScaleGranularity::kTensor:
    case ScaleGranularity::kChannel: return true;
    case ScaleGranularity::kBlock: return f.block_rows > 0 && f.block_cols > 0;
    case ScaleGranularity::kGroup: return f.block_cols > 0;
    case ScaleGranularity::kChunkGroup: return false;
  }
  return false;
}

bool CpuBackend::SupportsKvCacheDType(DType dtype) const {
  return dtype == DType::kF32 || dtype == DType::kF8E4M3;
}

absl::StatusOr<Buffer> CpuBackend::Allocate(size_t bytes) { return AllocateHost(bytes); }

absl::StatusOr<size_t> CpuBackend::FreeMemory() const {
  const long pages = sysconf(_SC_AVPHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page <= 0) return absl::InternalError("sysconf cannot tell free memory");
  return static_cast<size_t>(pages) * static_cast<size_t>(page);
}

absl::Status CpuBackend::CopyToDevice(Tensor dst, const void* src) {
  std::memcpy(dst.data(), src, dst.bytes());
  return absl::OkStatus();
}

absl::Status CpuBackend::CopyToHost(void* dst, Tensor src) {
  std::memcpy(dst, src.data(), src.bytes());
  return absl::OkStatus();
}

absl::Status CpuBackend::UploadConverted(const void* src, DType src_dtype, Tensor dst) {
  if (src_dtype != DType::kF32 && src_dtype != DType::kF16 && src_dtype != DType::kBF16 &&
      src_dtype != DType::kF8E4M3)
    return absl::InvalidArgumentError(
        absl::StrCat("UploadConverted: cannot convert ", std::string(DTypeName(src_dtype))));
  // Narrow host tensors: FP8 weights, and int4 scales kept in float16 (int4_fp16_scales), which
  // FillUniform's default (dummy weights) uploads through here.
  if ((dst.dtype() == DType::kF8E4M3 || dst.dtype() == DType::kF16) && dst.device().kind == DeviceKind::kCpu) {
    std::vector<float> values(static_cast<size_t>(dst.numel()));
    ConvertToFloat(src_dtype, src, values.data(), values.size());
    ConvertFromFloat(values.data(), dst.dtype(), dst.data(), values.size());
    return absl::OkStatus();
  }
  RETURN_IF_ERROR(ExpectF32("UploadConverted", {&dst}));
  ConvertToFloat(src_dtype, src, dst.data_as<float>(), dst.numel());
  return absl::OkStatus();
}

absl::Status CpuBackend::Embedding(Tensor table, Tensor ids, int64_t vocab_offset, Tensor out) {
  RETURN_IF_ERROR(ExpectF32("Embedding", {&table, &out}));
  RETURN_IF_ERROR(Expect(ids.dtype() == DType::kI32 && out.dim(0) == ids.numel() && table.rank() == 2 &&
                             out.numel() == ids.numel() * table.dim(1),
                         "Embedding", "shape mismatch"));
  const int64_t rows = table.dim(0), dim = table.dim(1);
  const float* tab = table.data_as<const float>();
  const int32_t* id = ids.data_as<const int32_t>();
  float* o = out.data_as<float>();
  for (int64_t t = 0; t < ids.numel(); ++t) {
    const int64_t local = static_cast<int64_t>(id[t]) - vocab_offset;
    if (local >= 0 && local < rows)
      std::memcpy(o + t * dim, tab + local * dim, dim * sizeof(float));
    else
      std::fill(o + t * dim, o + (t + 1) * dim, 0.0f);
  }
  return absl::OkStatus();
}

absl::Status CpuBackend::RmsNorm(Tensor x, Tensor weight, float eps, Tensor out) {
  RETURN_IF_ERROR(ExpectF32("RmsNorm", {&x, &weight, &out}));
  const int64_t dim = weight.numel();
  RETURN_IF_ERROR(Expect(dim > 0 && x.numel() % dim == 0 && out.numel() == x.numel(), "RmsNorm", "shape mismatch"));
  cpu::RmsNormRows(pool_, x.data_as<const float>(), weight.data_as<const float>(), eps, out.data_as<float>(),
                   x.numel() / dim, dim, nullptr, nullptr);
  return absl::OkStatus();
}

absl::Status CpuBackend::AddRmsNorm(Tensor residual, Tensor delta, Tensor weight, float eps, Tensor out) {
  RETURN_IF_ERROR(ExpectF32("AddRmsNorm", {&residual, &delta, &weight, &out}));
  const int64_t dim = weight.numel();
  RETURN_IF_ERROR(Expect(dim > 0 && residual.numel() % dim == 0 && out.numel() == residual.numel() &&
                             (delta.empty() || delta.numel() == residual.numel()),
                         "AddRmsNorm", "shape mismatch"));
  cpu::RmsNormRows(pool_, nullptr, weight.data_as<const float>(), eps, out.data_as<float>(),
                   residual.numel() / dim, dim, residual.data_as<float>(),
                   delta.empty() ? nullptr : delta.data_as<const float>());
  return absl::OkStatus();
}

absl::Status CpuBackend::Add(Tensor x, Tensor y) {
  RETURN_IF_ERROR(ExpectF32("Add", {&x, &y}));
  RETURN_IF_ERROR(Expect(x.numel() == y.numel(), "Add", "shape mismatch"));
  float* a = x.data_as<float>();
  const float* b = y.data_as<const float>();
  for (int64_t i = 0; i < x.numel(); ++i) a[i] += b[i];
  return absl::OkStatus();
}

absl::Status CpuBackend::Linear(Tensor x, const LinearWeight& w, Tensor out) {
  return LinearWithInput(x, nullptr, w, out);
}

absl::Status CpuBackend::LinearWithInput(Tensor x, const float* quantized_x, const LinearWeight& w, Tensor out) {
  RETURN_IF_ERROR(ExpectF32("Linear", {&x, &w.bias, &out}));
  RETURN_IF_ERROR(Expect(SupportsLinearFormat(w.format) && w.weight.dtype() == StoredDType(w.format.element) &&
                             w.weight.device().kind == DeviceKind::kCpu,
                         "Linear", absl::StrCat("weights of format ", w.format.ToString(), " stored as ",
                                                std::string(DTypeName(w.weight.dtype())))));
  const int64_t n = w.out_features(), k = w.in_features();
  RETURN_IF_ERROR(Expect(x.numel() % k == 0 && out.numel() == x.numel() / k * n &&
                             (w.bias.empty() || w.bias.numel() == n),
                         "Linear",
                         absl::StrCat("x ", x.shape().ToString(), " · W ", w.weight.shape().ToString(),
                                      " -> out ", out.shape().ToString())));
  const int64_t m = x.numel() / k;
  const float* bias = w.bias.empty() ? nullptr : w.bias.data_as<const float>();
  if (w.format.int4()) {
    RETURN_IF_ERROR(w.ValidateInt4("Linear"));
    const Int4View v = w.int4_view();
    const float* input = x.data_as<const float>();
    if (v.input_perm != nullptr) {
      if (permuted_input_.size() < static_cast<size_t>(m * v.kp)) permuted_input_.resize(m * v.kp);
      cpu::GatherInt4Input(pool_, input, v.input_perm, m, k, v.kp, permuted_input_.data());
      input = permuted_input_.data();
    }
    cpu::MatmulInt4(pool_, input, v, bias, out.data_as<float>(), m);
    return absl::OkStatus();
  }
  if (!w.format.scaled()) {
    cpu::Matmul(pool_, x.data_as<const float>(), w.weight.data_as<const float>(), bias, out.data_as<float>(), m, n,
                k);
    return absl::OkStatus();
  }
  const ScaleGrid grid = w.scale_grid();
  RETURN_IF_ERROR(Expect(w.scale.dtype() == DType::kF32 && w.scale.numel() == grid.numel(), "Linear",
                         absl::StrCat("scale of ", w.scale.numel(), " elements for ", w.format.ToString(),
                                      " weights ", w.weight.shape().ToString())));
  const float* input = quantized_x != nullptr ? quantized_x : x.data_as<const float>();
  if (quantized_x == nullptr && options_.emulate_fp8_activations && w.input_quant != ActivationQuant::kNone) {
    const bool is_static = w.input_quant == ActivationQuant::kStaticPerTensor;
    RETURN_IF_ERROR(Expect(!is_static || (w.input_scale.dtype() == DType::kF32 && w.input_scale.numel() == 1),
                           "Linear", "static activation quantization without an input scale"));
    if (quantized_input_.size() < static_cast<size_t>(x.numel())) quantized_input_.resize(x.numel());
    cpu::FakeQuantizeFp8(pool_, input, quantized_input_.data(), m, k, w.input_quant, w.input_group,
                         is_static ? *w.input_scale.data_as<const float>() : 0.0f);
    input = quantized_input_.data();
  }
  cpu::MatmulFp8(pool_, input, w.weight.data_as<const uint8_t>(), w.scale.data_as<const float>(), grid, bias,
                 out.data_as<float>(), m, n, k);
  return absl::OkStatus();
}

namespace {

// The cache: float32, or FP8 E4M3 in both K and V.
absl::Status ExpectCache(const char* op, const KvCacheLayer& c) {
  if (c.k.dtype() == DType::kF8E4M3 && c.v.dtype() == DType::kF8E4M3) {
    if (!(c.k_scale > 0 && c.v_scale > 0 && std::isfinite(c.k_scale) && std::isfinite(c.v_scale)))
      return absl::InvalidArgumentError(absl::StrCat(op, ": FP8 KV cache scales must be positive"));
    return absl::OkStatus();
  }
  return ExpectF32(op, {&c.k, &c.v});
}

}  // namespace

absl::Status CpuBackend::QkvRope(const QkvRopeArgs& a) {
  RETURN_IF_ERROR(ExpectF32("QkvRope", {&a.qkv, &a.q_norm, &a.k_norm, &a.q_out}));
  RETURN_IF_ERROR(ExpectCache("QkvRope", a.cache));
  const int64_t t = a.qkv.dim(0);
  RETURN_IF_ERROR(Expect(a.head_dim > 0 && a.head_dim <= 512 && a.rope.rotary_dim <= a.head_dim &&
                             a.rope.rotary_dim % 2 == 0 &&
                             a.qkv.numel() == t * (a.num_heads + 2 * a.num_kv_heads) * a.head_dim &&
                             a.q_out.numel() == t * a.num_heads * a.head_dim && a.positions.numel() >= t &&
                             a.slot_mapping.numel() >= t && a.cache.k.dim(1) == a.num_kv_heads &&
                             a.cache.k.dim(3) == a.head_dim,
                         "QkvRope", "shape mismatch"));
  cpu::QkvRope(pool_, a);
  return absl::OkStatus();
}

absl::Status CpuBackend::Attention(const AttentionArgs& a) {
  RETURN_IF_ERROR(ExpectF32("Attention", {&a.q, &a.out}));
  RETURN_IF_ERROR(ExpectCache("Attention", a.cache));
  RETURN_IF_ERROR(Expect(a.meta != nullptr && a.head_dim <= 512 && a.num_kv_heads > 0 &&
                             a.num_heads % a.num_kv_heads == 0 &&
                             a.q.numel() == int64_t{a.meta->num_tokens} * a.num_heads * a.head_dim &&
                             a.out.numel() == a.q.numel(),
                         "Attention", "shape mismatch"));
  cpu::PagedAttention(pool_, a);
  return absl::OkStatus();
}

absl::Status CpuBackend::SiluMul(Tensor gate_up, Tensor out) {
  RETURN_IF_ERROR(ExpectF32("SiluMul", {&gate_up, &out}));
  const int64_t rows = gate_up.dim(0);
  const int64_t f = rows ? out.numel() / rows : 0;
  RETURN_IF_ERROR(Expect(gate_up.numel() == 2 * out.numel(), "SiluMul", "shape mismatch"));
  const float* gu = gate_up.data_as<const float>();
  float* o = out.data_as<float>();
  pool_.ParallelFor(rows, 8, [&](int64_t begin, int64_t end, int) {
    for (int64_t r = begin; r < end; ++r)
      for (int64_t i = 0; i < f; ++i) {
        const float g = gu[r * 2 * f + i];
        o[r * f + i] = g / (1.0f + std::exp(-g)) * gu[r * 2 * f + f + i];
      }
  });
  return absl::OkStatus();
}

bool CpuBackend::TakesFp8Input(const LinearWeight& w, int64_t rows) const {
  return options_.emulate_fp8_activations && options_.fuse_fp8_input_quant && w.format.element == DType::kF8E4M3 &&
         (w.input_quant == ActivationQuant::kDynamicPerToken || w.input_quant == ActivationQuant::kStaticPerTensor);
}

absl::Status CpuBackend::QuantizeFor(Tensor out, const LinearWeight& consumer, Fp8Input quantized, const char* op) {
  const int64_t cols = consumer.in_features(), rows = cols > 0 ? out.numel() / cols : 0;
  RETURN_IF_ERROR(Expect(rows * cols == out.numel(), op, "the output does not match the consumer's input"));
  RETURN_IF_ERROR(ValidateFp8Input(op, quantized, consumer, rows, cols));
  const bool is_static = consumer.input_quant == ActivationQuant::kStaticPerTensor;
  cpu::QuantizeFp8Rows(pool_, out.data_as<const float>(), quantized.values.data_as<uint8_t>(),
                       is_static ? nullptr : quantized.scales.data_as<float>(), rows, cols, consumer.input_quant,
                       is_static ? *consumer.input_scale.data_as<const float>() : 0.0f);
  return absl::OkStatus();
}

absl::Status CpuBackend::AddRmsNormFp8(Tensor residual, Tensor delta, Tensor weight, float eps, Tensor out,
                                       const LinearWeight& consumer, Fp8Input quantized) {
  RETURN_IF_ERROR(AddRmsNorm(residual, delta, weight, eps, out));
  return QuantizeFor(out, consumer, quantized, "AddRmsNormFp8");
}

absl::Status CpuBackend::SiluMulFp8(Tensor gate_up, Tensor out, const LinearWeight& consumer, Fp8Input quantized) {
  RETURN_IF_ERROR(SiluMul(gate_up, out));
  return QuantizeFor(out, consumer, quantized, "SiluMulFp8");
}

absl::Status CpuBackend::LinearFp8Input(Tensor x, Fp8Input quantized, const LinearWeight& w, Tensor out) {
  const int64_t k = w.in_features(), m = k > 0 ? x.numel() / k : 0;
  RETURN_IF_ERROR(Expect(TakesFp8Input(w, m) && m * k == x.numel(), "LinearFp8Input",
                         "the weight does not take an FP8 input here"));
  RETURN_IF_ERROR(ValidateFp8Input("LinearFp8Input", quantized, w, m, k));
  const bool is_static = w.input_quant == ActivationQuant::kStaticPerTensor;
  if (quantized_input_.size() < static_cast<size_t>(x.numel())) quantized_input_.resize(x.numel());
  cpu::DequantizeFp8Rows(pool_, quantized.values.data_as<const uint8_t>(),
                         is_static ? nullptr : quantized.scales.data_as<const float>(), quantized_input_.data(), m, k,
                         w.input_quant, is_static ? *w.input_scale.data_as<const float>() : 0.0f);
  return LinearWithInput(x, quantized_input_.data(), w, out);
}

absl::Status CpuBackend::GatherRows(Tensor x, Tensor rows, Tensor out) {
  RETURN_IF_ERROR(ExpectF32("GatherRows", {&x, &out}));
  const int64_t n = rows.numel();
  const int64_t width = x.dim(0) ? x.numel() / x.dim(0) : 0;
  RETURN_IF_ERROR(Expect(rows.dtype() == DType::kI32 && out.numel() == n * width, "GatherRows", "shape mismatch"));
  const int32_t* r = rows.data_as<const int32_t>();
  for (int64_t i = 0; i < n; ++i) {
    RETURN_IF_ERROR(Expect(r[i] >= 0 && r[i] < x.dim(0), "GatherRows", "row out of range"));
    std::memcpy(out.data_as<float>() + i * width, x.data_as<const float>() + r[i] * width, width * sizeof(float));
  }
  return absl::OkStatus();
}

absl::Status CpuBackend::EnqueueSample(const SampleArgs& a) {
  RETURN_IF_ERROR(ExpectF32("Sample", {&a.logits}));
  RETURN_IF_ERROR(ValidateSampleRows(a.logits, a.rows));
  RETURN_IF_ERROR(Expect(a.slot >= 0 && a.slot < kSampleSlots, "Sample", "slot out of range"));
  absl::Span<const SampleRow> rows = a.rows;
  // A pending output token (sampled by the previous step, resolved into this step's input ids)
  // joins the row's outputs, as the CUDA sampler counts it on the device.
  const bool pending = std::any_of(rows.begin(), rows.end(), [](const SampleRow& r) { return r.pending_input_index >= 0; });
  if (pending) {
    RETURN_IF_ERROR(Expect(a.input_tokens.dtype() == DType::kI32, "Sample", "pending tokens need the step's input ids"));
    const int32_t* ids = a.input_tokens.data_as<const int32_t>();
    rows_with_pending_.assign(rows.begin(), rows.end());
    outputs_with_pending_.resize(rows.size());
    for (size_t r = 0; r < rows.size(); ++r) {
      SampleRow& row = rows_with_pending_[r];
      if (row.pending_input_index < 0) continue;
      RETURN_IF_ERROR(Expect(row.pending_input_index < a.input_tokens.numel(), "Sample", "pending index out of range"));
      std::vector<int32_t>& outputs = outputs_with_pending_[r];
      outputs.assign(row.output_tokens.begin(), row.output_tokens.end());
      outputs.push_back(ids[row.pending_input_index]);
      row.output_tokens = outputs;
      row.pending_input_index = -1;
    }
    rows = rows_with_pending_;
  }
  std::vector<SampleResult>& results = sample_slots_[a.slot];
  results.resize(rows.size());
  cpu::SampleRows(pool_, a.logits.data_as<const float>(), a.logits.dim(1), rows, absl::MakeSpan(results),
                  sampler_scratch_);
  if (!a.sampled_tokens.empty()) {
    RETURN_IF_ERROR(Expect(a.sampled_tokens.dtype() == DType::kI32 && a.sampled_tokens.numel() >= static_cast<int64_t>(rows.size()),
                           "Sample", "sampled token buffer too small"));
    int32_t* out = a.sampled_tokens.data_as<int32_t>();
    for (size_t r = 0; r < rows.size(); ++r) out[r] = results[r].token;
  }
  return absl::OkStatus();
}

absl::Status CpuBackend::ReadSampleResults(int slot, absl::Span<SampleResult> results) {
  RETURN_IF_ERROR(Expect(slot >= 0 && slot < kSampleSlots, "ReadSampleResults", "slot out of range"));
  const std::vector<SampleResult>& have = sample_slots_[slot];
  RETURN_IF_ERROR(Expect(have.size() == results.size(), "ReadSampleResults", "row count does not match the sampling"));
  std::copy(have.begin(), have.end(), results.begin());
  return absl::OkStatus();
}

absl::Status CpuBackend::ResolvePendingTokens(Tensor ids, Tensor sampled) {
  RETURN_IF_ERROR(Expect(ids.dtype() == DType::kI32 && sampled.dtype() == DType::kI32, "ResolvePendingTokens",
                         "ids must be int32"));
  int32_t* t = ids.data_as<int32_t>();
  const int32_t* s = sampled.data_as<const int32_t>();
  for (int64_t i = 0; i < ids.numel(); ++i) {
    if (t[i] >= 0) continue;
    const int64_t row = -static_cast<int64_t>(t[i]) - 1;
    RETURN_IF_ERROR(Expect(row < sampled.numel(), "ResolvePendingTokens", "pending row out of range"));
    t[i] = s[row];
  }
  return absl::OkStatus();
}

}  // namespace llm
