// A compiled PCRE2 pattern (UTF + Unicode properties, JIT when available) with the one query the
// tokenizer needs: every match in a string, the way the reference library's find_iter reports
// them. PCRE2 types stay out of this header.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace llm::tokenizer_internal {

class Regex {
 public:
  // Byte ranges [begin, end) of matches, in order, non-overlapping.
  using Matches = std::vector<std::pair<size_t, size_t>>;

  static absl::StatusOr<std::unique_ptr<Regex>> Compile(std::string_view pattern);
  // The pattern that matches `literal` exactly.
  static absl::StatusOr<std::unique_ptr<Regex>> CompileLiteral(std::string_view literal);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // `text` must be valid UTF-8 (not re-checked, for speed). Empty matches are reported, except one
  // right where the previous match ended, as Rust's and Oniguruma's iterators do.
  absl::Status FindAll(std::string_view text, Matches* matches) const;

  const std::string& pattern() const { return pattern_; }

 private:
  Regex(std::string pattern, void* code) : pattern_(std::move(pattern)), code_(code) {}

  std::string pattern_;
  void* code_;  // pcre2_code_8*
};

}  // namespace llm::tokenizer_internal
