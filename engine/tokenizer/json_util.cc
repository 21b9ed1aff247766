#include "engine/tokenizer/json_util.h"

#include <fstream>

#include "absl/strings/str_cat.h"

namespace llm::tokenizer_internal {
namespace {

const Json* Find(const Json& object, std::string_view key) {
  if (!object.is_object()) return nullptr;
  const auto it = object.find(key);
  return it == object.end() ? nullptr : &*it;
}

absl::Status FieldError(std::string_view key, std::string_view expected) {
  return absl::InvalidArgumentError(
      absl::StrCat("tokenizer.json: field \"", std::string(key), "\" must be ", std::string(expected)));
}

}  // namespace

absl::StatusOr<std::string> ComponentType(const Json& component, std::string_view what) {
  const Json* type = Find(component, "type");
  if (type == nullptr || !type->is_string()) {
    return absl::InvalidArgumentError(
        absl::StrCat("tokenizer.json: ", std::string(what), " has no \"type\" string"));
  }
  return type->get<std::string>();
}

absl::StatusOr<std::string> GetString(const Json& object, std::string_view key) {
  const Json* value = Find(object, key);
  if (value == nullptr || !value->is_string()) return FieldError(key, "a string");
  return value->get<std::string>();
}

absl::StatusOr<int64_t> GetInt(const Json& object, std::string_view key) {
  const Json* value = Find(object, key);
  if (value == nullptr || !value->is_number_integer()) return FieldError(key, "an integer");
  return value->get<int64_t>();
}

absl::StatusOr<const Json*> GetArray(const Json& object, std::string_view key) {
  const Json* value = Find(object, key);
  if (value == nullptr || !value->is_array()) return FieldError(key, "an array");
  return value;
}

absl::StatusOr<std::string> GetStringOr(const Json& object, std::string_view key, std::string fallback) {
  const Json* value = Find(object, key);
  if (value == nullptr || value->is_null()) return fallback;
  if (!value->is_string()) return FieldError(key, "a string");
  return value->get<std::string>();
}

absl::StatusOr<bool> GetBoolOr(const Json& object, std::string_view key, bool fallback) {
  const Json* value = Find(object, key);
  if (value == nullptr || value->is_null()) return fallback;
  if (!value->is_boolean()) return FieldError(key, "a boolean");
  return value->get<bool>();
}

absl::StatusOr<PatternSpec> GetPattern(const Json& object, std::string_view key) {
  const Json* value = Find(object, key);
  if (value == nullptr || !value->is_object()) return FieldError(key, "a {\"String\"|\"Regex\": ...} object");
  if (const Json* s = Find(*value, "String"); s != nullptr && s->is_string()) {
    return PatternSpec{false, s->get<std::string>()};
  }
  if (const Json* r = Find(*value, "Regex"); r != nullptr && r->is_string()) {
    return PatternSpec{true, r->get<std::string>()};
  }
  return FieldError(key, "a {\"String\"|\"Regex\": ...} object");
}

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  const std::streamoff size = in.tellg();
  if (size < 0) return absl::DataLossError(absl::StrCat("cannot read ", path));
  std::string contents(static_cast<size_t>(size), '\0');
  in.seekg(0);
  if (!in.read(contents.data(), size)) return absl::DataLossError(absl::StrCat("cannot read ", path));
  return contents;
}

}  // namespace llm::tokenizer_internal
