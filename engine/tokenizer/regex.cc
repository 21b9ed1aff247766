#include "engine/tokenizer/regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "absl/strings/str_cat.h"
#include "engine/tokenizer/utf8.h"

namespace llm::tokenizer_internal {
namespace {

// Match data and the JIT stack are per thread: PCRE2 forbids sharing them between concurrent
// matches, and creating them per call would cost an allocation (and an mmap) every Encode.
struct ThreadMatchState {
  ThreadMatchState() {
    match_data = pcre2_match_data_create(1, nullptr);  // only the whole match is read
    context = pcre2_match_context_create(nullptr);
    // The default 32 KiB JIT stack overflows on long runs of one class (e.g. megabytes of
    // whitespace); 8 MiB is reserved lazily by the kernel.
    jit_stack = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, nullptr);
    if (context != nullptr && jit_stack != nullptr) pcre2_jit_stack_assign(context, nullptr, jit_stack);
  }
  ~ThreadMatchState() {
    pcre2_jit_stack_free(jit_stack);
    pcre2_match_context_free(context);
    pcre2_match_data_free(match_data);
  }
  pcre2_match_data* match_data;
  pcre2_match_context* context;
  pcre2_jit_stack* jit_stack;
};

ThreadMatchState& MatchState() {
  thread_local ThreadMatchState state;
  return state;
}

std::string ErrorMessage(int code) {
  PCRE2_UCHAR buffer[256];
  pcre2_get_error_message(code, buffer, sizeof(buffer));
  return std::string(reinterpret_cast<const char*>(buffer));
}

}  // namespace

absl::StatusOr<std::unique_ptr<Regex>> Regex::Compile(std::string_view pattern) {
  int error_code = 0;
  PCRE2_SIZE error_offset = 0;
  pcre2_code* code =
      pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), PCRE2_UTF | PCRE2_UCP,
                    &error_code, &error_offset, nullptr);
  if (code == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("regex pattern \"", std::string(pattern),
                                                   "\" does not compile at offset ", error_offset, ": ",
                                                   ErrorMessage(error_code)));
  }
  // JIT is an optimization only: pcre2_match falls back to the interpreter when it is unavailable.
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
  return std::unique_ptr<Regex>(new Regex(std::string(pattern), code));
}

absl::StatusOr<std::unique_ptr<Regex>> Regex::CompileLiteral(std::string_view literal) {
  // \Q...\E quotes everything but a literal "\E", which is spliced out of the quote.
  std::string pattern = "\\Q";
  for (size_t i = 0; i < literal.size(); ++i) {
    if (literal.compare(i, 2, "\\E") == 0) {
      pattern += "\\E\\\\E\\Q";
      ++i;
    } else {
      pattern += literal[i];
    }
  }
  pattern += "\\E";
  return Compile(pattern);
}

Regex::~Regex() { pcre2_code_free(static_cast<pcre2_code*>(code_)); }

absl::Status Regex::FindAll(std::string_view text, Matches* matches) const {
  matches->clear();
  ThreadMatchState& state = MatchState();
  if (state.match_data == nullptr || state.context == nullptr) {
    return absl::ResourceExhaustedError("cannot allocate PCRE2 match data");
  }
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t start = 0;
  size_t last_end = static_cast<size_t>(-1);
  while (start <= text.size()) {
    const int rc = pcre2_match(static_cast<const pcre2_code*>(code_), subject, text.size(), start,
                               PCRE2_NO_UTF_CHECK, state.match_data, state.context);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      return absl::InternalError(absl::StrCat("regex \"", pattern_, "\" failed: ", ErrorMessage(rc)));
    }
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(state.match_data);
    const size_t begin = ovector[0];
    const size_t end = ovector[1];
    if (begin == end) {
      if (begin != last_end) matches->emplace_back(begin, end);
      if (begin >= text.size()) break;
      // Step over one code point so an empty match cannot repeat forever.
      start = begin + Utf8SequenceLength(static_cast<uint8_t>(text[begin]));
    } else {
      matches->emplace_back(begin, end);
      start = end;
    }
    last_end = end;
  }
  return absl::OkStatus();
}

}  // namespace llm::tokenizer_internal
