#include "engine/chat/python_text.h"

#include <unicode/locid.h>
#include <unicode/uchar.h>
#include <unicode/unistr.h>

#include <charconv>
#include <cmath>
#include <cstdlib>

#include "absl/strings/ascii.h"
#include "engine/chat/cat.h"
#include "engine/tokenizer/utf8.h"

namespace llm::chat {
namespace {

using tokenizer_internal::AppendCodePoint;
using tokenizer_internal::DecodeCodePoint;

std::string IcuToUtf8(const icu::UnicodeString& text) {
  std::string out;
  text.toUTF8String(out);
  return out;
}

icu::UnicodeString ToIcu(std::string_view text) {
  return icu::UnicodeString::fromUTF8(icu::StringPiece(text.data(), static_cast<int32_t>(text.size())));
}

bool IsCased(char32_t c) { return u_hasBinaryProperty(static_cast<UChar32>(c), UCHAR_CASED); }

std::string TitleOne(char32_t c) {
  if (c < 0x80) return std::string(1, absl::ascii_toupper(static_cast<char>(c)));
  icu::UnicodeString one(static_cast<UChar32>(c));
  one.toTitle(nullptr, icu::Locale::getRoot(), U_TITLECASE_NO_LOWERCASE | U_TITLECASE_NO_BREAK_ADJUSTMENT);
  return IcuToUtf8(one);
}

std::string LowerOne(char32_t c) {
  if (c < 0x80) return std::string(1, absl::ascii_tolower(static_cast<char>(c)));
  icu::UnicodeString one(static_cast<UChar32>(c));
  one.toLower(icu::Locale::getRoot());
  return IcuToUtf8(one);
}

bool InSet(char32_t c, const std::vector<char32_t>& set) {
  for (char32_t s : set)
    if (s == c) return true;
  return false;
}

// Whitespace split (sep=None) from the left: runs of whitespace separate, none at the ends.
std::vector<std::string> SplitWhitespace(std::string_view text, int64_t maxsplit) {
  std::vector<std::string> out;
  const std::vector<char32_t> cps = DecodeUtf8(text);
  size_t i = 0, n = cps.size();
  while (true) {
    while (i < n && IsPythonSpace(cps[i])) ++i;
    if (i == n) break;
    if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) {
      out.push_back(EncodeUtf8(std::vector<char32_t>(cps.begin() + i, cps.end())));
      break;
    }
    size_t j = i;
    while (j < n && !IsPythonSpace(cps[j])) ++j;
    out.push_back(EncodeUtf8(std::vector<char32_t>(cps.begin() + i, cps.begin() + j)));
    i = j;
  }
  return out;
}

}  // namespace

std::string FloatRepr(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  char buf[64];
  const std::to_chars_result r = std::to_chars(buf, buf + sizeof buf, value, std::chars_format::scientific);
  std::string_view s(buf, r.ptr - buf);
  std::string out;
  if (s[0] == '-') {
    out.push_back('-');
    s.remove_prefix(1);
  }
  const size_t e = s.find('e');
  std::string digits;
  for (char c : s.substr(0, e))
    if (c != '.') digits.push_back(c);
  int exponent = 0;
  std::from_chars(s.data() + e + 1 + (s[e + 1] == '+'), s.data() + s.size(), exponent);
  const int decpt = exponent + 1;  // digits read as 0.d1d2... x 10^decpt
  const int n = static_cast<int>(digits.size());
  if (decpt > -4 && decpt <= 16) {
    if (decpt <= 0) {
      CatAppend(&out, "0.", std::string(-decpt, '0'), digits);
    } else if (decpt >= n) {
      CatAppend(&out, digits, std::string(decpt - n, '0'), ".0");
    } else {
      CatAppend(&out, digits.substr(0, decpt), ".", digits.substr(decpt));
    }
  } else {
    out.push_back(digits[0]);
    if (n > 1) CatAppend(&out, ".", digits.substr(1));
    const int exp_abs = std::abs(exponent);
    CatAppend(&out, "e", exponent < 0 ? "-" : "+", exp_abs < 10 ? "0" : "", exp_abs);
  }
  return out;
}

std::string StringRepr(std::string_view text) {
  const bool has_single = text.find('\'') != std::string_view::npos;
  const bool has_double = text.find('"') != std::string_view::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out;
  out.reserve(text.size() + 2);
  out.push_back(quote);
  static constexpr char kHex[] = "0123456789abcdef";
  for (size_t pos = 0; pos < text.size();) {
    const char32_t c = DecodeCodePoint(text, &pos);
    if (c == static_cast<char32_t>(quote) || c == '\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(c));
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c < 0x20 || c == 0x7f) {
      CatAppend(&out, "\\x", std::string(1, kHex[c >> 4]), std::string(1, kHex[c & 15]));
    } else if (c < 0x7f || IsPythonPrintable(c)) {
      AppendCodePoint(c, &out);
    } else {
      int digits = c <= 0xff ? 2 : c <= 0xffff ? 4 : 8;
      out += digits == 2 ? "\\x" : digits == 4 ? "\\u" : "\\U";
      for (int k = digits - 1; k >= 0; --k) out.push_back(kHex[(c >> (4 * k)) & 15]);
    }
  }
  out.push_back(quote);
  return out;
}

bool IsPythonSpace(char32_t c) {
  switch (c) {
    case 0x09: case 0x0A: case 0x0B: case 0x0C: case 0x0D: case 0x1C: case 0x1D: case 0x1E:
    case 0x1F: case 0x20: case 0x85: case 0xA0: case 0x1680: case 0x2028: case 0x2029:
    case 0x202F: case 0x205F: case 0x3000:
      return true;
    default:
      return c >= 0x2000 && c <= 0x200A;
  }
}

bool IsPythonPrintable(char32_t c) {
  if (c == ' ') return true;
  switch (u_charType(static_cast<UChar32>(c))) {
    case U_CONTROL_CHAR: case U_FORMAT_CHAR: case U_SURROGATE: case U_PRIVATE_USE_CHAR:
    case U_UNASSIGNED: case U_LINE_SEPARATOR: case U_PARAGRAPH_SEPARATOR: case U_SPACE_SEPARATOR:
      return false;
    default:
      return true;
  }
}

std::vector<char32_t> DecodeUtf8(std::string_view text) {
  std::vector<char32_t> out;
  out.reserve(text.size());
  for (size_t pos = 0; pos < text.size();) out.push_back(DecodeCodePoint(text, &pos));
  return out;
}

std::string EncodeUtf8(const std::vector<char32_t>& code_points) {
  std::string out;
  out.reserve(code_points.size());
  for (char32_t c : code_points) AppendCodePoint(c, &out);
  return out;
}

void AppendUtf8(char32_t c, std::string* out) { AppendCodePoint(c, out); }

int64_t CodePointCount(std::string_view text) {
  int64_t n = 0;
  for (char c : text) n += (static_cast<uint8_t>(c) & 0xC0) != 0x80;
  return n;
}

bool IsAscii(std::string_view text) {
  for (char c : text)
    if (static_cast<uint8_t>(c) >= 0x80) return false;
  return true;
}

std::string PyLower(std::string_view text) {
  if (IsAscii(text)) return absl::AsciiStrToLower(AbslView(text));
  icu::UnicodeString u = ToIcu(text);
  u.toLower(icu::Locale::getRoot());
  return IcuToUtf8(u);
}

std::string PyUpper(std::string_view text) {
  if (IsAscii(text)) return absl::AsciiStrToUpper(AbslView(text));
  icu::UnicodeString u = ToIcu(text);
  u.toUpper(icu::Locale::getRoot());
  return IcuToUtf8(u);
}

std::string PyCapitalize(std::string_view text) {
  if (text.empty()) return "";
  size_t pos = 0;
  const char32_t first = DecodeCodePoint(text, &pos);
  return TitleOne(first) + PyLower(text.substr(pos));
}

std::string PyTitle(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  bool previous_cased = false;
  for (size_t pos = 0; pos < text.size();) {
    const char32_t c = DecodeCodePoint(text, &pos);
    out += previous_cased ? LowerOne(c) : TitleOne(c);
    previous_cased = IsCased(c);
  }
  return out;
}

std::string_view PyStrip(std::string_view text, const std::optional<std::string>& chars, bool left,
                         bool right) {
  std::vector<char32_t> set;
  if (chars) set = DecodeUtf8(*chars);
  auto strip_it = [&](char32_t c) { return chars ? InSet(c, set) : IsPythonSpace(c); };
  size_t begin = 0, end = text.size();
  if (left) {
    while (begin < end) {
      size_t next = begin;
      if (!strip_it(DecodeCodePoint(text, &next))) break;
      begin = next;
    }
  }
  if (right) {
    while (end > begin) {
      size_t start = end - 1;
      while (start > begin && (static_cast<uint8_t>(text[start]) & 0xC0) == 0x80) --start;
      size_t probe = start;
      if (!strip_it(DecodeCodePoint(text, &probe))) break;
      end = start;
    }
  }
  return text.substr(begin, end - begin);
}

std::vector<std::string> PySplit(std::string_view text, const std::optional<std::string>& sep,
                                 int64_t maxsplit) {
  if (!sep) return SplitWhitespace(text, maxsplit);
  std::vector<std::string> out;
  size_t start = 0;
  while (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) {
    const size_t at = text.find(*sep, start);
    if (at == std::string_view::npos) break;
    out.emplace_back(text.substr(start, at - start));
    start = at + sep->size();
  }
  out.emplace_back(text.substr(start));
  return out;
}

std::vector<std::string> PyRsplit(std::string_view text, const std::optional<std::string>& sep,
                                  int64_t maxsplit) {
  if (maxsplit < 0) return PySplit(text, sep, maxsplit);
  std::vector<std::string> out;
  if (!sep) {
    const std::vector<char32_t> cps = DecodeUtf8(text);
    int64_t end = static_cast<int64_t>(cps.size());
    while (true) {
      while (end > 0 && IsPythonSpace(cps[end - 1])) --end;
      if (end == 0) break;
      if (static_cast<int64_t>(out.size()) == maxsplit) {
        out.push_back(EncodeUtf8(std::vector<char32_t>(cps.begin(), cps.begin() + end)));
        break;
      }
      int64_t j = end;
      while (j > 0 && !IsPythonSpace(cps[j - 1])) --j;
      out.push_back(EncodeUtf8(std::vector<char32_t>(cps.begin() + j, cps.begin() + end)));
      end = j;
    }
  } else {
    size_t end = text.size();
    while (static_cast<int64_t>(out.size()) < maxsplit) {
      if (end < sep->size()) break;
      const size_t at = text.rfind(*sep, end - sep->size());
      if (at == std::string_view::npos) break;
      out.emplace_back(text.substr(at + sep->size(), end - at - sep->size()));
      end = at;
    }
    out.emplace_back(text.substr(0, end));
  }
  return std::vector<std::string>(out.rbegin(), out.rend());
}

std::vector<std::string> PySplitlines(std::string_view text, bool keepends) {
  std::vector<std::string> out;
  size_t line_start = 0;
  for (size_t pos = 0; pos < text.size();) {
    const size_t at = pos;
    const char32_t c = DecodeCodePoint(text, &pos);
    const bool boundary = c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || (c >= 0x1C && c <= 0x1E) ||
                          c == 0x85 || c == 0x2028 || c == 0x2029;
    if (!boundary) continue;
    if (c == '\r' && pos < text.size() && text[pos] == '\n') ++pos;
    out.emplace_back(text.substr(line_start, (keepends ? pos : at) - line_start));
    line_start = pos;
  }
  if (line_start < text.size()) out.emplace_back(text.substr(line_start));
  return out;
}

std::string PyReplace(std::string_view text, std::string_view old_text, std::string_view new_text,
                      int64_t count) {
  std::string out;
  if (old_text.empty()) {
    // Python inserts `new` before every character and at the end, up to `count` times.
    int64_t done = 0;
    size_t pos = 0;
    while (pos <= text.size()) {
      if (count >= 0 && done >= count) break;
      out.append(new_text);
      ++done;
      if (pos == text.size()) {
        pos = text.size() + 1;
        break;
      }
      const size_t len = tokenizer_internal::Utf8SequenceLength(static_cast<uint8_t>(text[pos]));
      out.append(text.substr(pos, len));
      pos += len;
    }
    if (pos <= text.size()) out.append(text.substr(pos));
    return out;
  }
  size_t start = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    const size_t at = text.find(old_text, start);
    if (at == std::string_view::npos) break;
    out.append(text.substr(start, at - start));
    out.append(new_text);
    start = at + old_text.size();
    ++done;
  }
  out.append(text.substr(start));
  return out;
}

int64_t PyFind(std::string_view text, std::string_view sub, bool reverse) {
  const size_t at = reverse ? text.rfind(sub) : text.find(sub);
  if (at == std::string_view::npos) return -1;
  return CodePointCount(text.substr(0, at));
}

int64_t PyCount(std::string_view text, std::string_view sub) {
  if (sub.empty()) return CodePointCount(text) + 1;
  int64_t n = 0;
  for (size_t at = text.find(sub); at != std::string_view::npos; at = text.find(sub, at + sub.size())) ++n;
  return n;
}

std::optional<int64_t> ParsePythonInt(std::string_view text, int base) {
  std::string_view s = PyStrip(text, std::nullopt, true, true);
  bool negative = false;
  if (!s.empty() && (s[0] == '+' || s[0] == '-')) {
    negative = s[0] == '-';
    s.remove_prefix(1);
  }
  if (base == 0 || base == 16 || base == 8 || base == 2) {
    if (s.size() > 2 && s[0] == '0') {
      const char p = absl::ascii_tolower(s[1]);
      const int prefixed = p == 'x' ? 16 : p == 'o' ? 8 : p == 'b' ? 2 : 0;
      if (prefixed != 0 && (base == 0 || base == prefixed)) {
        base = prefixed;
        s.remove_prefix(2);
        if (!s.empty() && s[0] == '_') s.remove_prefix(1);
      }
    }
    if (base == 0) base = 10;
  }
  if (s.empty() || s.front() == '_' || s.back() == '_' || base < 2 || base > 36) return std::nullopt;
  unsigned __int128 value = 0;
  char previous = 0;
  for (char c : s) {
    if (c == '_') {
      if (previous == '_') return std::nullopt;
      previous = c;
      continue;
    }
    previous = c;
    int digit;
    if (c >= '0' && c <= '9') digit = c - '0';
    else if (c >= 'a' && c <= 'z') digit = c - 'a' + 10;
    else if (c >= 'A' && c <= 'Z') digit = c - 'A' + 10;
    else return std::nullopt;
    if (digit >= base) return std::nullopt;
    value = value * base + digit;
    if (value > (static_cast<unsigned __int128>(1) << 63)) return std::nullopt;
  }
  if (!negative && value > static_cast<unsigned __int128>(INT64_MAX)) return std::nullopt;
  return negative ? static_cast<int64_t>(-static_cast<__int128>(value)) : static_cast<int64_t>(value);
}

std::optional<double> ParsePythonFloat(std::string_view text) {
  std::string_view s = PyStrip(text, std::nullopt, true, true);
  std::string clean;
  size_t i = 0;
  if (i < s.size() && (s[i] == '+' || s[i] == '-')) clean.push_back(s[i++]);
  const std::string rest = absl::AsciiStrToLower(AbslView(s.substr(i)));
  if (rest == "inf" || rest == "infinity" || rest == "nan") {
    clean += rest == "nan" ? "nan" : "inf";
    return std::strtod(clean.c_str(), nullptr);
  }
  // digits [. digits] [e [sign] digits], '_' only between digits.
  bool seen_digit = false, seen_dot = false, seen_exp = false;
  for (; i < s.size(); ++i) {
    const char c = s[i];
    if (c >= '0' && c <= '9') {
      seen_digit = true;
      clean.push_back(c);
    } else if (c == '_') {
      if (i == 0 || i + 1 >= s.size() || !absl::ascii_isdigit(s[i - 1]) || !absl::ascii_isdigit(s[i + 1]))
        return std::nullopt;
    } else if (c == '.' && !seen_dot && !seen_exp) {
      seen_dot = true;
      clean.push_back(c);
    } else if ((c == 'e' || c == 'E') && seen_digit && !seen_exp) {
      seen_exp = true;
      clean.push_back('e');
      if (i + 1 < s.size() && (s[i + 1] == '+' || s[i + 1] == '-')) clean.push_back(s[++i]);
      if (i + 1 >= s.size()) return std::nullopt;
      seen_digit = false;
    } else {
      return std::nullopt;
    }
  }
  if (!seen_digit) return std::nullopt;
  return std::strtod(clean.c_str(), nullptr);
}

}  // namespace llm::chat
