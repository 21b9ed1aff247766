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

// Oniguruma (the reference library's regex engine) and PCRE2 disagree on a few code points in
// \s and \w: PCRE2 counts U+180E as a space, and its \w takes every number but no marks. Spelling
// the classes out as Oniguruma defines them makes the two agree.
constexpr std::string_view kSpaceItems = R"(\t\n\x0B\f\r\x{85}\p{Z})";
constexpr std::string_view kWordItems = R"(\p{L}\p{M}\p{Nd}\p{Pc})";

std::string OnigurumaClasses(std::string_view pattern) {
  std::string out;
  out.reserve(pattern.size() * 2);
  bool in_class = false;
  size_t class_start = 0;  // index in `out` just past "[" or "[^": a "]" there is literal
  for (size_t i = 0; i < pattern.size();) {
    const char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      const char e = pattern[i + 1];
      if (e == 'Q') {  // quoted literal text runs to \E
        const size_t end = pattern.find("\\E", i + 2);
        const size_t stop = end == std::string_view::npos ? pattern.size() : end + 2;
        out.append(pattern.substr(i, stop - i));
        i = stop;
        continue;
      }
      std::string_view items;
      if (e == 's' || e == 'S') items = kSpaceItems;
      if (e == 'w' || e == 'W') items = kWordItems;
      const bool negated = e == 'S' || e == 'W';
      if (!items.empty() && in_class && !negated) {
        out.append(items);
      } else if (!items.empty() && !in_class) {
        out.append(negated ? "[^" : "[").append(items).append("]");
      } else {
        out.append(pattern.substr(i, 2));  // other escapes, and \S \W inside a class, stay
      }
      i += 2;
      continue;
    }
    out.push_back(c);
    ++i;
    if (!in_class && c == '[') {
      in_class = true;
      if (i < pattern.size() && pattern[i] == '^') out.push_back(pattern[i++]);
      class_start = out.size();
    } else if (in_class && c == '[' && i < pattern.size() && pattern[i] == ':') {
      const size_t end = pattern.find(":]", i);  // POSIX class such as [:alpha:]
      if (end != std::string_view::npos) {
        out.append(pattern.substr(i, end + 2 - i));
        i = end + 2;
      }
    } else if (in_class && c == ']' && out.size() - 1 != class_start) {
      in_class = false;
    }
  }
  return out;
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
  const std::string rewritten = OnigurumaClasses(pattern);
  pcre2_code* code =
      pcre2_compile(reinterpret_cast<PCRE2_SPTR>(rewritten.data()), rewritten.size(), PCRE2_UTF | PCRE2_UCP,
                    &error_code, &error_offset, nullptr);
  if (code == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("regex pattern \"", std::string(pattern),
                                                   "\" does not compile: ", ErrorMessage(error_code),
                                                   " (at offset ", error_offset, " of \"", rewritten, "\")"));
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
