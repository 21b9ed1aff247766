#include "engine/model/dummy_weights.h"

#include <cmath>
#include <deque>
#include <functional>
#include <string>

namespace llm {

absl::StatusOr<std::unique_ptr<ModelWeights>> CreateDummyWeights(const ModelConfig& config, const ShardSpec& shard,
                                                                  Backend& backend, uint64_t seed) {
  // Every tensor the loader asks for "exists" with exactly the shape it expects.
  std::deque<TensorRecord> records;
  const internal::TensorLookup lookup = [&](const std::string& name, const std::vector<int64_t>& shape)
      -> absl::StatusOr<const TensorRecord*> {
    TensorRecord& r = records.emplace_back();
    r.name = name;
    r.file = "<dummy>";
    r.dtype = DType::kF32;
    r.shape = shape;
    return &r;
  };
  const internal::TensorFill fill = [&](Tensor dst, const std::string& name) -> absl::Status {
    const uint64_t tensor_seed = seed * 0x9E3779B97F4A7C15ull ^ std::hash<std::string>{}(name);
    float low, high;
    if (name.find("norm") != std::string::npos) {
      low = 0.8f;
      high = 1.2f;
    } else if (dst.rank() == 1) {  // biases
      low = -0.05f;
      high = 0.05f;
    } else {  // [out, in]: uniform(-a, a) has variance a^2 / 3 = 1 / in
      const float a = std::sqrt(3.0f / static_cast<float>(dst.dim(1)));
      low = -a;
      high = a;
    }
    return backend.FillUniform(dst, tensor_seed, low, high);
  };
  return internal::BuildWeights(config, shard, backend, lookup, fill);
}

}  // namespace llm
