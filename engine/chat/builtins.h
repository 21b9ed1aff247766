// The names templates find without defining them: jinja2's filters and tests, the Python methods
// of str, dict and list that chat templates call, and the global functions (jinja2's range,
// dict, namespace, cycler, joiner and transformers' raise_exception and strftime_now).
#pragma once

#include <string_view>

#include "absl/status/statusor.h"
#include "engine/chat/ast.h"
#include "engine/chat/value.h"

namespace llm::chat {

// Null when there is no such filter or test.
FilterFn FindFilter(std::string_view name);
TestFn FindTest(std::string_view name);

// The attribute `name` of a str, list, tuple or dict when it is a method: a callable bound to
// `receiver`; a mutating method (append, update, ...) is an undefined value that raises
// SecurityError when used, as in jinja2's immutable sandbox. Undefined when there is no such method.
Value MethodAttribute(const Value& receiver, std::string_view name);
// Calls the method directly (what `x.strip()` does without building the bound method). Sets
// `*found` to false when `receiver` has no such safe method.
absl::StatusOr<Value> CallMethod(Interpreter& in, const Value& receiver, std::string_view name,
                                 CallArgs& args, bool* found);

// A global function; undefined when none has that name.
Value FindGlobal(std::string_view name);

}  // namespace llm::chat
