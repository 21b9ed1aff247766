// Decoders: turn the token strings of a sequence of ids back into text. Each stage rewrites the
// list of token strings (the reference's decode_chain); the result is their concatenation.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/tokenizer/json_util.h"

namespace llm::tokenizer_internal {

class Decoder {
 public:
  virtual ~Decoder() = default;
  virtual absl::Status DecodeChain(std::vector<std::string>* tokens) const = 0;
};

// The "decoder" object of tokenizer.json; null gives a null pointer (tokens joined by spaces).
// Supported types: ByteLevel, Replace, ByteFallback, Fuse, Strip, Metaspace, Sequence.
absl::StatusOr<std::unique_ptr<Decoder>> DecoderFromJson(const Json& config);

}  // namespace llm::tokenizer_internal
