#include "engine/model/json_reader.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "kernels/core/status.h"

namespace llm {
namespace {

// Longest excerpt of an offending value quoted in an error message.
constexpr size_t kMaxQuotedChars = 60;

}  // namespace

absl::StatusOr<nlohmann::json> ParseJsonText(std::string_view text, std::string_view source) {
  try {
    return nlohmann::json::parse(text.begin(), text.end());
  } catch (const nlohmann::json::exception& e) {
    // e.what() carries nlohmann's "parse error at line L, column C: ..." position.
    return absl::InvalidArgumentError(
        absl::StrCat(std::string(source), ": malformed JSON: ", e.what()));
  }
}

absl::StatusOr<std::string> ReadTextFile(const std::filesystem::path& path) {
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> file(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (file == nullptr) {
    const int err = errno;
    std::string message = absl::StrCat("cannot open '", path.string(), "': ", std::strerror(err));
    return err == ENOENT ? absl::NotFoundError(message) : absl::InternalError(message);
  }
  std::string text;
  char buffer[1 << 16];
  size_t n;
  while ((n = std::fread(buffer, 1, sizeof(buffer), file.get())) > 0) text.append(buffer, n);
  if (std::ferror(file.get())) {
    return absl::InternalError(absl::StrCat("cannot read '", path.string(), "'"));
  }
  return text;
}

std::optional<int64_t> JsonToInt64(const nlohmann::json& value) {
  if (const auto* i = value.get_ptr<const nlohmann::json::number_integer_t*>()) return *i;
  if (const auto* u = value.get_ptr<const nlohmann::json::number_unsigned_t*>()) {
    if (*u <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return static_cast<int64_t>(*u);
    }
  }
  return std::nullopt;
}

std::string DescribeJson(const nlohmann::json& value) {
  if (value.is_null()) return "null";
  // replace: a dump must not throw on a string that is not valid UTF-8.
  std::string text = value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  if (text.size() > kMaxQuotedChars) text = absl::StrCat(text.substr(0, kMaxQuotedChars), "...");
  return absl::StrCat(value.type_name(), " ", text);
}

absl::StatusOr<JsonObjectReader> JsonObjectReader::Create(const nlohmann::json& value,
                                                          std::string source, std::string path) {
  if (!value.is_object()) {
    const std::string where = path.empty() ? "the top level" : absl::StrCat("key '", path, "'");
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": ", where, " must be a JSON object, got ", DescribeJson(value)));
  }
  return JsonObjectReader(&value, std::move(source), std::move(path));
}

const nlohmann::json* JsonObjectReader::Find(std::string_view key) const {
  auto it = value_->find(std::string(key));
  if (it == value_->end() || it->is_null()) return nullptr;
  return &*it;
}

absl::StatusOr<std::optional<int64_t>> JsonObjectReader::OptionalInt(std::string_view key) const {
  const nlohmann::json* v = Find(key);
  if (v == nullptr) return std::nullopt;
  std::optional<int64_t> i = JsonToInt64(*v);
  if (!i) return KeyError(key, absl::StrCat("must be an integer, got ", DescribeJson(*v)));
  return i;
}

absl::StatusOr<int64_t> JsonObjectReader::RequiredInt(std::string_view key) const {
  ASSIGN_OR_RETURN(std::optional<int64_t> i, OptionalInt(key));
  if (!i) return KeyError(key, "is missing or null (required)");
  return *i;
}

absl::StatusOr<std::optional<double>> JsonObjectReader::OptionalDouble(std::string_view key) const {
  const nlohmann::json* v = Find(key);
  if (v == nullptr) return std::nullopt;
  if (!v->is_number()) return KeyError(key, absl::StrCat("must be a number, got ", DescribeJson(*v)));
  return v->get<double>();  // cannot throw: is_number() was checked
}

absl::StatusOr<std::optional<bool>> JsonObjectReader::OptionalBool(std::string_view key) const {
  const nlohmann::json* v = Find(key);
  if (v == nullptr) return std::nullopt;
  if (!v->is_boolean()) {
    return KeyError(key, absl::StrCat("must be true or false, got ", DescribeJson(*v)));
  }
  return v->get<bool>();
}

absl::StatusOr<std::optional<std::string>> JsonObjectReader::OptionalString(
    std::string_view key) const {
  const nlohmann::json* v = Find(key);
  if (v == nullptr) return std::nullopt;
  if (!v->is_string()) return KeyError(key, absl::StrCat("must be a string, got ", DescribeJson(*v)));
  return v->get<std::string>();
}

absl::StatusOr<std::optional<JsonObjectReader>> JsonObjectReader::OptionalObject(
    std::string_view key) const {
  const nlohmann::json* v = Find(key);
  if (v == nullptr) return std::nullopt;
  ASSIGN_OR_RETURN(JsonObjectReader reader, Create(*v, source_, KeyPath(key)));
  return reader;
}

absl::Status JsonObjectReader::KeyError(std::string_view key, std::string_view what) const {
  return absl::InvalidArgumentError(
      absl::StrCat(source_, ": key '", KeyPath(key), "' ", std::string(what)));
}

std::string JsonObjectReader::KeyPath(std::string_view key) const {
  return path_.empty() ? std::string(key) : absl::StrCat(path_, ".", std::string(key));
}

}  // namespace llm
