// Errors of the template engine. Each carries the class of error Python's jinja2 would raise for
// the same template (so tests can compare with it) and, once known, the template line. They travel
// as absl::Status (InvalidArgument; ResourceExhausted for the sandbox's limits) with both facts in
// payloads, and render as "template line N: Class: message".
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "absl/status/status.h"

namespace llm::chat {

enum class ErrorKind {
  kSyntax,          // TemplateSyntaxError (also TemplateAssertionError)
  kUndefined,       // UndefinedError: use of an undefined value
  kType,            // TypeError
  kAttribute,       // AttributeError (a filter applied to a value it cannot handle)
  kValue,           // ValueError
  kZeroDivision,    // ZeroDivisionError
  kOverflow,        // OverflowError (range too big, integer too large)
  kSecurity,        // SecurityError: the sandbox refused an attribute or a call
  kRuntime,         // TemplateRuntimeError (bad filter arguments, unknown filter at run time)
  kRaised,          // TemplateError raised by the template itself (raise_exception)
  kLimit,           // this engine's resource limits (output, iterations, recursion depth)
};

// The Python class name of `kind` ("UndefinedError", ...); "LimitError" for kLimit.
std::string_view ErrorClassName(ErrorKind kind);

absl::Status TemplateError(ErrorKind kind, std::string_view message);

// The kind of an error made by TemplateError; nullopt for other statuses.
std::optional<ErrorKind> ErrorKindOf(const absl::Status& status);
// The template line recorded on the error, if any.
std::optional<int> ErrorLineOf(const absl::Status& status);
// Records `line` on the error unless it already has one (the innermost node knows best).
absl::Status WithLine(absl::Status status, int line);
// "template line N: Class: message" (or without the line part when none was recorded).
std::string FormatTemplateError(const absl::Status& status);

}  // namespace llm::chat
