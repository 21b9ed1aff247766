// Parser: tokens to the syntax tree, following jinja2's grammar (operator precedence, tuples
// without parentheses, `is` tests, filters, chained comparisons, conditional expressions) and its
// statements, plus the loopcontrols extension's break/continue and transformers' generation tag.
// Template-inheritance and loading tags (extends, include, import) are refused: a chat template
// is one self-contained string.
#pragma once

#include <vector>

#include "absl/status/statusor.h"
#include "engine/chat/ast.h"
#include "engine/chat/lexer.h"

namespace llm::chat {

// TemplateSyntaxError naming the line on malformed templates, and on nesting deeper than
// `max_depth` (so a hostile template cannot exhaust the stack).
absl::StatusOr<StmtList> Parse(const std::vector<Token>& tokens, int max_depth);

}  // namespace llm::chat
