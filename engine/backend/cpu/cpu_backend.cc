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
  if (f.element != DType::kF8E4M3) return false;
  switch (f.granularity) {
    case ScaleGranularity::kNone: return false;
    case ScaleGranularity::kTensor:
    case ScaleGranularity::kChannel: return true;
    case ScaleGranularity::kBlock: return f.block_rows > 0 && f.block_cols > 0;
    case ScaleGranularity::kGroup: return f.block_cols > 0;
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
  if (dst.dtype() == DType::kF8E4M3 && dst.device().kind == DeviceKind::kCpu) {
    std::vector<float> values(static_cast<size_t>(dst.numel()));
    ConvertToFloat(src_dtype, src, values.data(), values.size());
    ConvertFromFloat(values.data(), DType::kF8E4M3, dst.data(), values.size());
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
  RETURN_IF_ERROR(ExpectF32("Linear", {&x, &w.bias, &out}));
  RETURN_IF_ERROR(Expect(SupportsLinearFormat(w.format) && w.weight.dtype() == w.format.element &&
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
  if (!w.format.scaled()) {
    cpu::Matmul(pool_, x.data_as<const float>(), w.weight.data_as<const float>(), bias, out.data_as<float>(), m, n,
                k);
    return absl::OkStatus();
  }
  const ScaleGrid grid = w.scale_grid();
  RETURN_IF_ERROR(Expect(w.scale.dtype() == DType::kF32 && w.scale.numel() == grid.numel(), "Linear",
                         absl::StrCat("scale of ", w.scale.numel(), " elements for ", w.format.ToString(),
                                      " weights ", w.weight.shape().ToString())));
  const float* input = x.data_as<const float>();
  if (options_.emulate_fp8_activations && w.input_quant != ActivationQuant::kNone) {
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

absl::Status CpuBackend::Sample(Tensor logits, absl::Span<const SampleRow> rows, absl::Span<SampleResult> results) {
  RETURN_IF_ERROR(ExpectF32("Sample", {&logits}));
  RETURN_IF_ERROR(ValidateSampleArgs(logits, rows, results));
  cpu::SampleRows(pool_, logits.data_as<const float>(), logits.dim(1), rows, results, sampler_scratch_);
  return absl::OkStatus();
}

}  // namespace llm
