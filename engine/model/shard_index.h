// The weight map of a sharded checkpoint: model.safetensors.index.json's
//   {"metadata": {...}, "weight_map": {"<tensor>": "model-00001-of-00004.safetensors", ...}}
#pragma once

#include <map>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace llm {

// Tensor name -> shard file name. Each shard must be a plain file name: an index cannot point
// outside the checkpoint directory. Errors are InvalidArgument naming `source`.
absl::StatusOr<std::map<std::string, std::string>> ParseShardIndex(std::string_view json_text,
                                                                   std::string_view source);

}  // namespace llm
