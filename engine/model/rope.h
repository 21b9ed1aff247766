// Rotary-embedding frequencies for every rope variant the loader accepts, computed once on the
// host, so that the device kernels only ever see inv_freq and one scaling factor.
#pragma once

#include <vector>

#include "absl/status/statusor.h"
#include "engine/model/config.h"

namespace llm {

struct RopeTable {
  std::vector<float> inv_freq;  // [rotary_dim / 2]
  int rotary_dim = 0;
  float attention_scaling = 1.0f;
};

// default, linear, llama3 and yarn as Hugging Face's rope init functions define them; dynamic NTK
// is Unimplemented (its frequencies depend on the running sequence length).
absl::StatusOr<RopeTable> ComputeRopeTable(const ModelConfig& config);

}  // namespace llm
