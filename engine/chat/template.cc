#include "engine/chat/template.h"

#include "engine/chat/lexer.h"
#include "engine/chat/parser.h"
#include "engine/chat/template_error.h"
#include "kernels/core/status.h"

namespace llm::chat {
namespace {

// The status a caller sees: the message says where and what; the payloads stay for ErrorKindOf.
absl::Status Finalize(const absl::Status& status) {
  absl::Status out(status.code(), FormatTemplateError(status));
  status.ForEachPayload([&](absl::string_view url, const absl::Cord& payload) { out.SetPayload(url, payload); });
  return out;
}

}  // namespace

absl::StatusOr<std::shared_ptr<const Template>> Template::Parse(std::string_view source) {
  absl::StatusOr<std::vector<Token>> tokens = Tokenize(source);
  if (!tokens.ok()) return Finalize(tokens.status());
  absl::StatusOr<StmtList> body = chat::Parse(*tokens, kMaxParseDepth);
  if (!body.ok()) return Finalize(body.status());
  return std::shared_ptr<const Template>(new Template(*std::move(body)));
}

absl::StatusOr<std::string> Template::Render(const ValueDict& context, const RenderLimits& limits,
                                             std::optional<std::time_t> now) const {
  Interpreter interpreter(context, limits, now.value_or(std::time(nullptr)));
  absl::StatusOr<std::string> out = interpreter.Run(body_);
  if (!out.ok()) return Finalize(out.status());
  return out;
}

}  // namespace llm::chat
