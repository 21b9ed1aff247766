#include "engine/chat/template_error.h"

#include "absl/strings/cord.h"
#include "absl/strings/numbers.h"
#include "engine/chat/cat.h"

namespace llm::chat {
namespace {

constexpr char kKindPayload[] = "llm.chat/kind";
constexpr char kLinePayload[] = "llm.chat/line";

}  // namespace

std::string_view ErrorClassName(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::kSyntax: return "TemplateSyntaxError";
    case ErrorKind::kUndefined: return "UndefinedError";
    case ErrorKind::kType: return "TypeError";
    case ErrorKind::kAttribute: return "AttributeError";
    case ErrorKind::kValue: return "ValueError";
    case ErrorKind::kZeroDivision: return "ZeroDivisionError";
    case ErrorKind::kOverflow: return "OverflowError";
    case ErrorKind::kSecurity: return "SecurityError";
    case ErrorKind::kRuntime: return "TemplateRuntimeError";
    case ErrorKind::kRaised: return "TemplateError";
    case ErrorKind::kLimit: return "LimitError";
  }
  return "TemplateError";
}

absl::Status TemplateError(ErrorKind kind, std::string_view message) {
  absl::Status status = kind == ErrorKind::kLimit ? absl::ResourceExhaustedError(AbslView(message))
                                                   : absl::InvalidArgumentError(AbslView(message));
  status.SetPayload(kKindPayload, absl::Cord(Cat(static_cast<int>(kind))));
  return status;
}

std::optional<ErrorKind> ErrorKindOf(const absl::Status& status) {
  absl::optional<absl::Cord> payload = status.GetPayload(kKindPayload);
  int value = 0;
  if (!payload || !absl::SimpleAtoi(std::string(*payload), &value)) return std::nullopt;
  return static_cast<ErrorKind>(value);
}

std::optional<int> ErrorLineOf(const absl::Status& status) {
  absl::optional<absl::Cord> payload = status.GetPayload(kLinePayload);
  int value = 0;
  if (!payload || !absl::SimpleAtoi(std::string(*payload), &value)) return std::nullopt;
  return value;
}

absl::Status WithLine(absl::Status status, int line) {
  if (status.ok() || status.GetPayload(kLinePayload)) return status;
  status.SetPayload(kLinePayload, absl::Cord(Cat(line)));
  return status;
}

std::string FormatTemplateError(const absl::Status& status) {
  std::string out;
  if (std::optional<int> line = ErrorLineOf(status)) CatAppend(&out, "template line ", *line, ": ");
  if (std::optional<ErrorKind> kind = ErrorKindOf(status)) CatAppend(&out, ErrorClassName(*kind), ": ");
  CatAppend(&out, status.message());
  return out;
}

}  // namespace llm::chat
