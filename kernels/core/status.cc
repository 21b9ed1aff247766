#include "kernels/core/status.h"

#include <cstdio>
#include <cstdlib>

namespace llm::internal {
void CheckFailed(const char* expr, const char* file, int line) {
  std::fprintf(stderr, "LLM_CHECK failed: %s at %s:%d\n", expr, file, line);
  std::abort();
}
}  // namespace llm::internal
