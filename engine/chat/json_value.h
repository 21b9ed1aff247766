// JSON in and out of template values. Out: Python's json.dumps(ensure_ascii=False) exactly as
// transformers' `tojson` filter calls it (indent, separators, sort_keys; key order kept
// otherwise). In: JSON text to values, keeping object key order, integers as int and numbers with
// a fraction or exponent as float, as Python's json.loads does.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "engine/chat/value.h"
#include "nlohmann/json.hpp"

namespace llm::chat {

struct JsonDumpOptions {
  std::optional<std::string> indent;  // nullopt: one line
  std::string item_separator = ", ";  // json.dumps defaults: ", " without indent, "," with it
  std::string key_separator = ": ";
  bool sort_keys = false;
  bool ensure_ascii = false;  // escape every character outside printable ASCII as \uXXXX
};

// TypeError for values JSON cannot hold (undefined, callables) and for dict keys other than
// str, int, float, bool and None, with Python's messages.
absl::StatusOr<std::string> DumpJson(const Value& value, const JsonDumpOptions& options);

Value FromJson(const nlohmann::ordered_json& json);
// InvalidArgument naming the parse error.
absl::StatusOr<Value> ParseJson(std::string_view text);

}  // namespace llm::chat
