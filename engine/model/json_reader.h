// JsonObjectReader: typed, non-throwing reads of one object of a parsed JSON document, whose errors
// name the file and the key path ("/m/config.json: key 'rope_scaling.factor' must be a number, got
// string \"x\""). nlohmann::json throws on type mismatches; keeping every access behind this reader
// is what lets the checkpoint layer promise that no exception crosses its API.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace llm {

// Parses `text`; malformed JSON is InvalidArgument naming `source` and the parser's position.
absl::StatusOr<nlohmann::json> ParseJsonText(std::string_view text, std::string_view source);

// Reads a whole (small) text file: config.json, generation_config.json, an index. NotFound when
// it does not exist.
absl::StatusOr<std::string> ReadTextFile(const std::filesystem::path& path);

// The value as int64 when it is a JSON integer that fits; nullopt for anything else (1.0 included).
std::optional<int64_t> JsonToInt64(const nlohmann::json& value);

// "string \"abc\"", "number 1.5", "null": what was found, for error messages.
std::string DescribeJson(const nlohmann::json& value);

class JsonObjectReader {
 public:
  // `value` must be a JSON object and outlive the reader. `path` is the key path of `value`
  // inside the document ("" for the top level), used to qualify key names in messages.
  static absl::StatusOr<JsonObjectReader> Create(const nlohmann::json& value, std::string source,
                                                 std::string path = "");

  // The value of `key`, or nullptr when it is absent or JSON null: both mean "not given".
  const nlohmann::json* Find(std::string_view key) const;

  absl::StatusOr<std::optional<int64_t>> OptionalInt(std::string_view key) const;
  absl::StatusOr<int64_t> RequiredInt(std::string_view key) const;
  absl::StatusOr<std::optional<double>> OptionalDouble(std::string_view key) const;
  absl::StatusOr<std::optional<bool>> OptionalBool(std::string_view key) const;
  absl::StatusOr<std::optional<std::string>> OptionalString(std::string_view key) const;
  absl::StatusOr<std::optional<JsonObjectReader>> OptionalObject(std::string_view key) const;

  // InvalidArgument "<source>: key '<path.key>' <what>".
  absl::Status KeyError(std::string_view key, std::string_view what) const;
  // "<path.key>", or "<key>" at the top level.
  std::string KeyPath(std::string_view key) const;

  const nlohmann::json& value() const { return *value_; }
  const std::string& source() const { return source_; }

 private:
  JsonObjectReader(const nlohmann::json* value, std::string source, std::string path)
      : value_(value), source_(std::move(source)), path_(std::move(path)) {}

  const nlohmann::json* value_;
  std::string source_;
  std::string path_;
};

}  // namespace llm
