// Normalizers: rewrite the text between added tokens before it is pre-tokenized.
#pragma once

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/tokenizer/json_util.h"

namespace llm::tokenizer_internal {

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  // `text` is valid UTF-8 and stays so.
  virtual absl::Status Normalize(std::string* text) const = 0;
};

// The "normalizer" object of tokenizer.json; null gives a null pointer (no normalization).
// Supported types: NFC, NFD, NFKC, NFKD, Prepend, Replace, Strip, Lowercase, Sequence.
absl::StatusOr<std::unique_ptr<Normalizer>> NormalizerFromJson(const Json& config);

}  // namespace llm::tokenizer_internal
