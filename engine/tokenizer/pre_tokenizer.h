// Pre-tokenizers: cut normalized text into the pieces ("words") that the model tokenizes
// independently, possibly rewriting them (ByteLevel's byte alphabet, Metaspace's "▁").
#pragma once

#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/tokenizer/json_util.h"
#include "engine/tokenizer/split.h"

namespace llm::tokenizer_internal {

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Replaces every piece by its non-empty splits, in order.
  virtual absl::Status PreTokenize(PreTokens* pieces) const = 0;
  // Whether splitting drops text (delimiters removed): then a prompt's size bounds nothing.
  virtual bool DropsText() const { return false; }
};

// The "pre_tokenizer" object of tokenizer.json; null gives a null pointer (the whole text is one
// piece). Supported types: Split, ByteLevel, Metaspace, Digits, Whitespace, WhitespaceSplit,
// Sequence.
absl::StatusOr<std::unique_ptr<PreTokenizer>> PreTokenizerFromJson(const Json& config);

}  // namespace llm::tokenizer_internal
