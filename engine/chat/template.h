// Template: a Jinja template parsed once and rendered any number of times, concurrently, with
// Python jinja2's semantics as Hugging Face transformers configures it for chat templates
// (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, loopcontrols, its tojson,
// raise_exception, strftime_now and generation tag). Rendering is sandboxed: no I/O, and the
// limits in RenderLimits stop runaway templates with an error.
//
// Errors (InvalidArgument; ResourceExhausted for the limits) read "template line N: Class: message",
// where Class is the Python exception jinja2 raises (ErrorKindOf() gives it as an enum).
#pragma once

#include <ctime>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "engine/chat/ast.h"
#include "engine/chat/interpreter.h"
#include "engine/chat/value.h"

namespace llm::chat {

class Template {
 public:
  // A template nested deeper than this (blocks, parentheses, operators) is refused.
  static constexpr int kMaxParseDepth = 200;

  static absl::StatusOr<std::shared_ptr<const Template>> Parse(std::string_view source);

  // `context` holds the variables the template sees.
  // `now`: the time strftime_now() formats; the current time when not given.
  absl::StatusOr<std::string> Render(const ValueDict& context, const RenderLimits& limits = {},
                                     std::optional<std::time_t> now = std::nullopt) const;

 private:
  explicit Template(StmtList body) : body_(std::move(body)) {}
  StmtList body_;
};

}  // namespace llm::chat
