// Python's operations on values as jinja2's sandbox performs them: arithmetic, membership,
// iteration, len(), attribute and item access (an attribute first for `a.b`, an item first for
// `a[b]`, undefined when neither exists), slicing and calls.
#pragma once

#include <cstdint>
#include <string_view>

#include "absl/status/statusor.h"
#include "engine/chat/ast.h"
#include "engine/chat/value.h"

namespace llm::chat {

class Interpreter;

// Arithmetic operators (not and/or, which short-circuit in the evaluator).
absl::StatusOr<Value> BinaryOperation(BinaryOp op, const Value& a, const Value& b, Interpreter& in);
absl::StatusOr<Value> Negate(const Value& a, bool negative);  // unary - and +
// `item in container`.
absl::StatusOr<bool> Contains(const Value& container, const Value& item);
// The items a for loop or filter sees: list/tuple items, dict keys, a string's characters,
// nothing for undefined; TypeError for values that are not iterable.
absl::StatusOr<ValueList> Iterate(const Value& value, Interpreter& in);
absl::StatusOr<int64_t> Length(const Value& value);
absl::StatusOr<Value> GetAttribute(const Value& object, std::string_view name);
absl::StatusOr<Value> GetItem(const Value& object, const Value& key);
// object[start:stop:step]; absent parts are undefined values.
absl::StatusOr<Value> SliceValue(const Value& object, const Value& start, const Value& stop, const Value& step,
                                 Interpreter& in);
absl::StatusOr<Value> CallValue(const Value& callee, CallArgs args, Interpreter& in);
// Python's printf-style `format % args` (the `%` operator on strings and the `format` filter).
absl::StatusOr<std::string> PercentFormat(std::string_view format, const Value& args);

}  // namespace llm::chat
