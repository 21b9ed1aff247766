// Error-propagation macros shared by every module. Debian 12's Abseil predates
// ABSL_RETURN_IF_ERROR, so the two small macros live here, once.
#pragma once

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define LLM_STATUS_CONCAT_INNER(a, b) a##b
#define LLM_STATUS_CONCAT(a, b) LLM_STATUS_CONCAT_INNER(a, b)

// Evaluates `expr` (an absl::Status); returns it from the enclosing function when not OK.
#define RETURN_IF_ERROR(expr)                          \
  do {                                                 \
    ::absl::Status llm_status_ = (expr);               \
    if (!llm_status_.ok()) return llm_status_;         \
  } while (0)

// ASSIGN_OR_RETURN(auto x, StatusOrExpr()): binds the value or returns the error.
#define ASSIGN_OR_RETURN(lhs, expr) \
  LLM_ASSIGN_OR_RETURN_IMPL(LLM_STATUS_CONCAT(llm_statusor_, __LINE__), lhs, expr)
#define LLM_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                              \
  if (!tmp.ok()) return tmp.status();             \
  lhs = std::move(tmp).value()

// Programmer-error check: aborts with file/line. Not for user input (return a Status then).
#define LLM_CHECK(cond)                                                                   \
  do {                                                                                    \
    if (!(cond)) ::llm::internal::CheckFailed(#cond, __FILE__, __LINE__);                 \
  } while (0)

namespace llm::internal {
[[noreturn]] void CheckFailed(const char* expr, const char* file, int line);
}  // namespace llm::internal
