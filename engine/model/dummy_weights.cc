#include "engine/model/dummy_weights.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <functional>
#include <string>

namespace llm {

absl::StatusOr<std::unique_ptr<ModelWeights>> CreateDummyWeights(const ModelConfig& config, const ShardSpec& shard,
                                                                  Backend& backend, uint64_t seed,
                                                                  const LoadOptions& options) {
  // Every tensor the loader asks for "exists" with exactly the shape and kind it expects; the
  // optional ones (KV cache scales) do not.
  std::deque<TensorRecord> records;
  internal::WeightSource source;
  source.lookup = [&](const std::string& name, const std::vector<int64_t>& shape,
                      internal::TensorKind kind) -> absl::StatusOr<const TensorRecord*> {
    TensorRecord& r = records.emplace_back();
    r.name = name;
    r.file = "<dummy>";
    r.dtype = kind == internal::TensorKind::kFp8 ? DType::kF8E4M3 : DType::kF32;
    r.shape = shape;
    return &r;
  };
  source.exists = [](const std::string&) { return false; };
  source.fill = [&](Tensor dst, const std::string& name, int64_t fan_in) -> absl::Status {
    const uint64_t tensor_seed = seed * 0x9E3779B97F4A7C15ull ^ std::hash<std::string>{}(name);
    // Uniform(-a, a) has variance a^2 / 3 = 1 / fan_in.
    const float a = std::sqrt(3.0f / static_cast<float>(std::max<int64_t>(fan_in, 1)));
    float low, high;
    if (name.ends_with(".int4_codes")) {  // two uniform codes a byte
      low = 0.0f;
      high = 256.0f;
    } else if (name.ends_with(".int4_scales")) {
      low = high = 1.0f / std::sqrt(21.25f * static_cast<float>(std::max<int64_t>(fan_in, 1)));
    } else if (dst.dtype() == DType::kF8E4M3) {  // E4M3 elements over their whole range
      low = -kFp8E4M3Max;
      high = kFp8E4M3Max;
    } else if (name.ends_with("input_scale")) {
      low = high = 0.01f;
    } else if (name.find("weight_scale") != std::string::npos) {
      low = high = a / kFp8E4M3Max;
    } else if (name.find("norm") != std::string::npos) {
      low = 0.8f;
      high = 1.2f;
    } else if (dst.rank() == 1) {  // biases
      low = -0.05f;
      high = 0.05f;
    } else {
      low = -a;
      high = a;
    }
    return backend.FillUniform(dst, tensor_seed, low, high);
  };
  return internal::BuildWeights(config, shard, backend, source, options);
}

}  // namespace llm
