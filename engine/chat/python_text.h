// Python's str semantics over UTF-8 text: what the template engine needs to print values and run
// string methods and filters exactly as CPython does (str/repr of floats and strings, whitespace,
// case mapping, strip/split/splitlines, indexing by code point). Text is assumed valid UTF-8.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace llm::chat {

// repr(float) (also str()): the shortest round-trip digits, '1e+16' / '1e-05' outside
// [1e-4, 1e16), '.0' on integral values, 'inf', '-inf', 'nan'.
std::string FloatRepr(double value);
// repr(str): quotes chosen as Python does, escapes for backslash, quote, \t \n \r, other
// non-printable characters as \xNN, \uNNNN or \UNNNNNNNN.
std::string StringRepr(std::string_view text);

bool IsPythonSpace(char32_t c);      // str.isspace() for one character
bool IsPythonPrintable(char32_t c);  // str.isprintable() for one character

// Code points of `text`, and the inverse.
std::vector<char32_t> DecodeUtf8(std::string_view text);
std::string EncodeUtf8(const std::vector<char32_t>& code_points);
void AppendUtf8(char32_t c, std::string* out);
// len(text): the number of code points.
int64_t CodePointCount(std::string_view text);
bool IsAscii(std::string_view text);

// str.lower(), str.upper(), str.capitalize(), str.title(), str.swapcase() with full Unicode case
// mappings.
std::string PyLower(std::string_view text);
std::string PyUpper(std::string_view text);
std::string PyCapitalize(std::string_view text);
std::string PyTitle(std::string_view text);

// str.strip/lstrip/rstrip(chars): `chars` nullopt strips whitespace.
std::string_view PyStrip(std::string_view text, const std::optional<std::string>& chars, bool left,
                         bool right);
// str.split(sep, maxsplit) / str.rsplit: `sep` nullopt splits on whitespace runs. maxsplit < 0: all.
std::vector<std::string> PySplit(std::string_view text, const std::optional<std::string>& sep,
                                 int64_t maxsplit);
std::vector<std::string> PyRsplit(std::string_view text, const std::optional<std::string>& sep,
                                  int64_t maxsplit);
// str.splitlines(keepends): every line boundary Python knows (\n, \r\n, \r, \v, \f, \x1c-\x1e,
// \x85, U+2028, U+2029).
std::vector<std::string> PySplitlines(std::string_view text, bool keepends);
// str.replace(old, new, count); count < 0 replaces all. An empty `old` inserts between characters.
std::string PyReplace(std::string_view text, std::string_view old_text, std::string_view new_text,
                      int64_t count);
// str.find / str.count over code points (bytes would give the same truth value but not the index).
int64_t PyFind(std::string_view text, std::string_view sub, bool reverse);
int64_t PyCount(std::string_view text, std::string_view sub);

// Python's `int(text, base)` for base 10 (surrounding whitespace, sign and '_' separators
// allowed); nullopt where Python raises ValueError or the value does not fit in 64 bits.
std::optional<int64_t> ParsePythonInt(std::string_view text, int base);
// Python's `float(text)`: decimal and 'inf'/'nan' spellings with surrounding whitespace.
std::optional<double> ParsePythonFloat(std::string_view text);

}  // namespace llm::chat
