// Lexer: template source to tokens, with jinja2's whitespace rules as transformers configures
// them: newlines normalized to \n and one trailing newline dropped, `{%-`/`-%}` (and the same on
// `{{ }}` and `{# #}`) strip whitespace next to the tag, trim_blocks removes the newline after a
// block or comment tag, lstrip_blocks removes spaces and tabs before one on its line, `+` turns
// either off for one tag, and `{% raw %}` passes text through.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace llm::chat {

enum class TokenType {
  kData,           // literal template text
  kVariableBegin,  // {{
  kVariableEnd,    // }}
  kBlockBegin,     // {%
  kBlockEnd,       // %}
  kName,
  kString,   // value: the unescaped text
  kInteger,  // int_value
  kFloat,    // float_value
  kOperator,  // value: the operator's spelling ("+", "//", "(", ...)
  kEnd,
};

struct Token {
  TokenType type = TokenType::kEnd;
  std::string value;
  int64_t int_value = 0;
  double float_value = 0;
  int line = 1;
};

// TemplateSyntaxError (see template_error.h) naming the line for malformed input.
absl::StatusOr<std::vector<Token>> Tokenize(std::string_view source);

}  // namespace llm::chat
