#include "engine/tokenizer/utf8.h"

#include <unicode/uchar.h>

namespace llm::tokenizer_internal {
namespace {

bool IsContinuation(uint8_t b) { return (b & 0xC0) == 0x80; }

// Length of the well-formed sequence starting at `text[pos]`, or the negated number of bytes that
// form its maximal invalid subpart (at least 1). Ranges follow the Unicode table of well-formed
// byte sequences (Table 3-7), which is what makes the subparts "maximal".
int ScanSequence(std::string_view text, size_t pos) {
  const auto byte = [&](size_t i) { return static_cast<uint8_t>(text[i]); };
  const uint8_t lead = byte(pos);
  if (lead < 0x80) return 1;
  int need;
  uint8_t lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (lead >= 0xC2 && lead <= 0xDF) {
    need = 1;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    need = 2;
    if (lead == 0xE0) lo = 0xA0;
    if (lead == 0xED) hi = 0x9F;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    need = 3;
    if (lead == 0xF0) lo = 0x90;
    if (lead == 0xF4) hi = 0x8F;
  } else {
    return -1;
  }
  for (int k = 1; k <= need; ++k) {
    if (pos + k >= text.size()) return -k;  // truncated: everything seen so far is one subpart
    const uint8_t b = byte(pos + k);
    const bool ok = (k == 1) ? (b >= lo && b <= hi) : IsContinuation(b);
    if (!ok) return -k;
  }
  return need + 1;
}

}  // namespace

bool IsValidUtf8(std::string_view text) {
  size_t pos = 0;
  const size_t n = text.size();
  while (pos < n) {
    // ASCII runs dominate real text; skip them eight bytes at a time.
    while (pos + 8 <= n) {
      uint64_t chunk;
      __builtin_memcpy(&chunk, text.data() + pos, 8);
      if (chunk & 0x8080808080808080ULL) break;
      pos += 8;
    }
    if (pos >= n) break;
    const int len = ScanSequence(text, pos);
    if (len < 0) return false;
    pos += len;
  }
  return true;
}

char32_t DecodeCodePoint(std::string_view text, size_t* pos) {
  const auto byte = [&](size_t i) { return static_cast<uint8_t>(text[i]); };
  const uint8_t lead = byte(*pos);
  const size_t len = Utf8SequenceLength(lead);
  char32_t cp;
  switch (len) {
    case 1:
      cp = lead;
      break;
    case 2:
      cp = ((lead & 0x1F) << 6) | (byte(*pos + 1) & 0x3F);
      break;
    case 3:
      cp = ((lead & 0x0F) << 12) | ((byte(*pos + 1) & 0x3F) << 6) | (byte(*pos + 2) & 0x3F);
      break;
    default:
      cp = ((lead & 0x07) << 18) | ((byte(*pos + 1) & 0x3F) << 12) | ((byte(*pos + 2) & 0x3F) << 6) |
           (byte(*pos + 3) & 0x3F);
      break;
  }
  *pos += len;
  return cp;
}

void AppendCodePoint(char32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

std::string Utf8Lossy(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  size_t pos = 0;
  while (pos < bytes.size()) {
    const int len = ScanSequence(bytes, pos);
    if (len > 0) {
      out.append(bytes.data() + pos, len);
      pos += len;
    } else {
      out.append(kReplacementChar);
      pos += -len;
    }
  }
  return out;
}

bool IsWhitespace(char32_t c) { return u_hasBinaryProperty(static_cast<UChar32>(c), UCHAR_WHITE_SPACE); }

bool IsNumeric(char32_t c) {
  const int8_t type = u_charType(static_cast<UChar32>(c));
  return type == U_DECIMAL_DIGIT_NUMBER || type == U_LETTER_NUMBER || type == U_OTHER_NUMBER;
}

bool IsAlphanumeric(char32_t c) {
  return u_hasBinaryProperty(static_cast<UChar32>(c), UCHAR_ALPHABETIC) || IsNumeric(c);
}

bool IsWordChar(char32_t c) {
  const auto u = static_cast<UChar32>(c);
  if (u_hasBinaryProperty(u, UCHAR_ALPHABETIC) || u_hasBinaryProperty(u, UCHAR_JOIN_CONTROL)) return true;
  const int8_t type = u_charType(u);
  return type == U_NON_SPACING_MARK || type == U_COMBINING_SPACING_MARK || type == U_ENCLOSING_MARK ||
         type == U_DECIMAL_DIGIT_NUMBER || type == U_CONNECTOR_PUNCTUATION;
}

}  // namespace llm::tokenizer_internal
