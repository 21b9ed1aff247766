// Post-processors: add a single sequence's special tokens (e.g. a leading <s>) when Encode is
// asked for them. Pairs of sequences are not part of this API.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/tokenizer/json_util.h"

namespace llm::tokenizer_internal {

class PostProcessor {
 public:
  virtual ~PostProcessor() = default;
  // Adds the special tokens around `ids`; called only when Encode is asked for them.
  virtual void Process(std::vector<int32_t>* ids) const = 0;
};

// The "post_processor" object of tokenizer.json; null gives a null pointer.
// Supported types: TemplateProcessing, ByteLevel, RobertaProcessing, BertProcessing, Sequence.
absl::StatusOr<std::unique_ptr<PostProcessor>> PostProcessorFromJson(const Json& config);

}  // namespace llm::tokenizer_internal
