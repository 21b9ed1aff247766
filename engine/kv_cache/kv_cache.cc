#include "engine/kv_cache/kv_cache.h"

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace llm {

absl::StatusOr<std::optional<DType>> ParseKvCacheDType(std::string_view name) {
  const std::string n = absl::AsciiStrToLower(std::string(name));
  if (n.empty() || n == "auto") return std::nullopt;
  if (n == "fp8" || n == "fp8_e4m3" || n == "float8_e4m3fn") return DType::kF8E4M3;
  absl::StatusOr<DType> t = ParseDType(n);
  if (!t.ok())
    return absl::InvalidArgumentError(
        absl::StrCat("unknown KV cache dtype '", std::string(name), "' (auto, bf16, fp16, fp32 or fp8)"));
  return *t;
}

absl::StatusOr<DType> ChooseKvCacheDType(std::optional<DType> requested, bool checkpoint_has_scales,
                                         const Backend& backend) {
  if (requested) {
    if (!backend.SupportsKvCacheDType(*requested))
      return absl::InvalidArgumentError(absl::StrCat("this backend cannot keep the KV cache in ",
                                                     std::string(DTypeName(*requested)), " (it computes in ",
                                                     std::string(DTypeName(backend.activation_dtype())), ")"));
    return *requested;
  }
  const DType act = backend.activation_dtype();
  if (checkpoint_has_scales && act != DType::kF32 && backend.SupportsKvCacheDType(DType::kF8E4M3))
    return DType::kF8E4M3;
  return act;
}

absl::StatusOr<std::unique_ptr<KvCache>> KvCache::Create(Backend& backend, const KvCacheShape& shape,
                                                         absl::Span<const KvCacheScales> scales) {
  if (shape.dtype == DType::kF8E4M3 && !scales.empty() && static_cast<int64_t>(scales.size()) != shape.num_layers)
    return absl::InvalidArgumentError(absl::StrCat("KV cache scales for ", scales.size(), " layers, the cache has ",
                                                   shape.num_layers));
  if (shape.num_layers <= 0 || shape.num_blocks <= 0 || shape.block_size <= 0 || shape.num_kv_heads <= 0 ||
      shape.head_dim <= 0)
    return absl::InvalidArgumentError(absl::StrCat("invalid KV cache shape: ", shape.num_layers, " layers, ",
                                                   shape.num_blocks, " blocks of ", shape.block_size, " tokens"));
  auto cache = std::unique_ptr<KvCache>(new KvCache());
  cache->shape_ = shape;
  ASSIGN_OR_RETURN(cache->memory_, backend.Allocate(shape.BytesPerBlock() * shape.num_blocks));
  const Shape per_layer{shape.num_blocks, shape.num_kv_heads, shape.block_size, shape.head_dim};
  const size_t half = static_cast<size_t>(per_layer.numel()) * DTypeSize(shape.dtype);
  for (int64_t l = 0; l < shape.num_layers; ++l) {
    KvCacheLayer layer{cache->memory_.View(shape.dtype, per_layer, (2 * l) * half),
                       cache->memory_.View(shape.dtype, per_layer, (2 * l + 1) * half)};
    if (shape.dtype == DType::kF8E4M3 && !scales.empty()) {
      layer.k_scale = scales[l].k;
      layer.v_scale = scales[l].v;
    }
    cache->layers_.push_back(layer);
  }
  return cache;
}

}  // namespace llm
