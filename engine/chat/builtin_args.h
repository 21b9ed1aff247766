// Argument binding shared by the built-in filters, tests, methods and functions: Python's rules
// for positional and keyword arguments against a fixed parameter list, with TypeError for
// unexpected or repeated ones; and conversions of arguments to C++ types.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/chat/value.h"

namespace llm::chat {

class Interpreter;

class BoundArgs {
 public:
  // `fn` names the callee in errors; `params` are its parameter names in order.
  static absl::StatusOr<BoundArgs> Bind(std::string_view fn, CallArgs& args,
                                        std::initializer_list<std::string_view> params);
  // Null when the argument was not given.
  const Value* Get(size_t i) const { return values_[i] ? &*values_[i] : nullptr; }
  Value Or(size_t i, Value fallback) const { return values_[i] ? *values_[i] : std::move(fallback); }
  bool Has(size_t i) const { return values_[i].has_value(); }

 private:
  std::vector<std::optional<Value>> values_;
};

absl::StatusOr<int64_t> ToInt(const Value& v, std::string_view what);
// A string argument; non-strings are converted with str() where Python would (`str(x)`).
std::string ToStr(const Value& v);

// jinja2's attribute getter for filters (`attribute='a.b'` / `'0'`): item access first, for each
// dotted part (digits index lists).
absl::StatusOr<Value> GetPath(const Value& item, const Value& attribute);
// Lowercases strings for case-insensitive sorting and comparison (jinja2's ignore_case).
Value IgnoreCase(const Value& v);

}  // namespace llm::chat
