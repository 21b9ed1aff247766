// Typed, exception-free reads of tokenizer.json fields. nlohmann::json throws on a type mismatch;
// these turn every malformed field into an InvalidArgument status that names it.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"

namespace llm::tokenizer_internal {

using Json = nlohmann::json;

// The "type" of a component object; `what` names the component in errors ("normalizer").
absl::StatusOr<std::string> ComponentType(const Json& component, std::string_view what);

// Required fields.
absl::StatusOr<std::string> GetString(const Json& object, std::string_view key);
absl::StatusOr<int64_t> GetInt(const Json& object, std::string_view key);
absl::StatusOr<const Json*> GetArray(const Json& object, std::string_view key);

// Optional fields: absent or null give `fallback`; a present field of the wrong type is an error.
absl::StatusOr<std::string> GetStringOr(const Json& object, std::string_view key, std::string fallback);
absl::StatusOr<bool> GetBoolOr(const Json& object, std::string_view key, bool fallback);

// A {"String": "..."} or {"Regex": "..."} pattern as Replace and Split use it.
struct PatternSpec {
  bool is_regex = false;
  std::string text;
};
absl::StatusOr<PatternSpec> GetPattern(const Json& object, std::string_view key);

// Reads a whole file; NotFound when it does not exist.
absl::StatusOr<std::string> ReadFile(const std::string& path);

}  // namespace llm::tokenizer_internal
