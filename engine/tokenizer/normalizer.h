// Normalizers: rewrite the text between added tokens before it is pre-tokenized.
#pragma once

#include <memory>
#include <optional>
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
  // At most how many bytes of input one byte of the output stands for (composition, case
  // folding and replacement by something shorter shrink text); nullopt when nothing bounds it
  // (stripping or a pattern that can remove any amount). Lets a server bound a prompt's token
  // count from its size before tokenizing it.
  virtual std::optional<double> MaxShrink() const { return std::nullopt; }
};

// The "normalizer" object of tokenizer.json; null gives a null pointer (no normalization).
// Supported types: NFC, NFD, NFKC, NFKD, Prepend, Replace, Strip, Lowercase, Sequence.
absl::StatusOr<std::unique_ptr<Normalizer>> NormalizerFromJson(const Json& config);

}  // namespace llm::tokenizer_internal
