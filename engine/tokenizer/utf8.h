// UTF-8 helpers shared by the tokenizer stages: validation, code point iteration, and the lossy
// decoding that the reference library applies to detokenized bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace llm::tokenizer_internal {

inline constexpr std::string_view kReplacementChar = "\xEF\xBF\xBD";  // U+FFFD

// True when `text` is well-formed UTF-8 (no overlongs, surrogates or code points past U+10FFFF).
bool IsValidUtf8(std::string_view text);

// Length in bytes of the code point whose lead byte is `lead`, for text already known valid.
inline size_t Utf8SequenceLength(uint8_t lead) {
  if (lead < 0x80) return 1;
  if (lead < 0xE0) return 2;
  if (lead < 0xF0) return 3;
  return 4;
}

// Decodes the code point at `*pos` of valid UTF-8 `text` and advances `*pos` past it.
char32_t DecodeCodePoint(std::string_view text, size_t* pos);

void AppendCodePoint(char32_t code_point, std::string* out);

// Bytes to text the way Rust's String::from_utf8_lossy does it: each maximal invalid subpart (an
// incomplete or broken sequence) becomes one U+FFFD. Decode results must match the reference
// byte for byte, so the substitution granularity matters.
std::string Utf8Lossy(std::string_view bytes);

// Unicode predicates with the meaning Rust's `char` methods give them, which the reference uses.
bool IsWhitespace(char32_t c);    // White_Space property
bool IsAlphanumeric(char32_t c);  // Alphabetic or numeric (Nd, Nl, No)
bool IsNumeric(char32_t c);       // General category Nd, Nl or No
bool IsWordChar(char32_t c);      // Regex \w: Alphabetic, marks, Nd, Pc, Join_Control

}  // namespace llm::tokenizer_internal
