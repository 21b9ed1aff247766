#include "engine/chat/lexer.h"

#include <algorithm>
#include <charconv>
#include <cstdlib>

#include "absl/strings/ascii.h"
#include "engine/chat/cat.h"
#include "engine/chat/python_text.h"
#include "engine/chat/template_error.h"
#include "engine/tokenizer/utf8.h"
#include "kernels/core/status.h"

namespace llm::chat {
namespace {

using tokenizer_internal::DecodeCodePoint;

// Operators, longest first so that "//" wins over "/".
constexpr std::string_view kOperators[] = {"//", "**", "==", "!=", ">=", "<=", "+", "-", "/", "*", "%",
                                           "~",  "[",  "]",  "(",  ")",  "{",  "}", "=", ".", ":", "|",
                                           ",",  ";",  ">",  "<"};

absl::Status SyntaxError(int line, std::string_view message) {
  return WithLine(TemplateError(ErrorKind::kSyntax, message), line);
}

// Length of the Python whitespace (\s) run at `pos`.
size_t WhitespaceRun(std::string_view s, size_t pos) {
  size_t end = pos;
  while (end < s.size()) {
    size_t next = end;
    if (!IsPythonSpace(DecodeCodePoint(s, &next))) break;
    end = next;
  }
  return end - pos;
}

bool AllWhitespace(std::string_view s) { return !s.empty() && WhitespaceRun(s, 0) == s.size(); }

std::string_view RstripWhitespace(std::string_view s) { return PyStrip(s, std::nullopt, false, true); }

int CountNewlines(std::string_view s) { return static_cast<int>(std::count(s.begin(), s.end(), '\n')); }

// Decodes Python's string escapes (what jinja2 applies to string literals: unicode-escape).
absl::StatusOr<std::string> Unescape(std::string_view body, int line) {
  std::string out;
  out.reserve(body.size());
  for (size_t i = 0; i < body.size(); ++i) {
    const char c = body[i];
    if (c != '\\' || i + 1 >= body.size()) {
      out.push_back(c);
      continue;
    }
    const char e = body[++i];
    auto hex = [&](int digits) -> absl::StatusOr<char32_t> {
      if (i + digits >= body.size()) return SyntaxError(line, "truncated escape in string literal");
      uint32_t value = 0;
      for (int k = 1; k <= digits; ++k) {
        const char h = body[i + k];
        if (!absl::ascii_isxdigit(h)) return SyntaxError(line, "truncated escape in string literal");
        value = value * 16 + (absl::ascii_isdigit(h) ? h - '0' : absl::ascii_tolower(h) - 'a' + 10);
      }
      i += digits;
      if (value > 0x10FFFF) return SyntaxError(line, "illegal Unicode character in string literal");
      return static_cast<char32_t>(value);
    };
    switch (e) {
      case '\n': break;  // line continuation
      case '\\': out.push_back('\\'); break;
      case '\'': out.push_back('\''); break;
      case '"': out.push_back('"'); break;
      case 'a': out.push_back('\a'); break;
      case 'b': out.push_back('\b'); break;
      case 'f': out.push_back('\f'); break;
      case 'n': out.push_back('\n'); break;
      case 'r': out.push_back('\r'); break;
      case 't': out.push_back('\t'); break;
      case 'v': out.push_back('\v'); break;
      case 'x': case 'u': case 'U': {
        ASSIGN_OR_RETURN(char32_t cp, hex(e == 'x' ? 2 : e == 'u' ? 4 : 8));
        if (cp >= 0xD800 && cp <= 0xDFFF) return SyntaxError(line, "surrogate escapes are not supported");
        AppendUtf8(cp, &out);
        break;
      }
      default:
        if (e >= '0' && e <= '7') {
          uint32_t value = e - '0';
          for (int k = 0; k < 2 && i + 1 < body.size() && body[i + 1] >= '0' && body[i + 1] <= '7'; ++k)
            value = value * 8 + (body[++i] - '0');
          AppendUtf8(value, &out);
        } else {
          out.push_back('\\');
          out.push_back(e);
        }
    }
  }
  return out;
}

class Lexer {
 public:
  explicit Lexer(std::string source) : s_(std::move(source)) {}

  absl::StatusOr<std::vector<Token>> Run() {
    while (pos_ < s_.size()) RETURN_IF_ERROR(RootStep());
    Emit(TokenType::kEnd, "");
    return std::move(tokens_);
  }

 private:
  enum class Opener { kNone, kRaw, kVariable, kBlock, kComment };

  void Emit(TokenType type, std::string value) {
    Token t;
    t.type = type;
    t.value = std::move(value);
    t.line = line_;
    tokens_.push_back(std::move(t));
  }

  bool At(size_t pos, std::string_view what) const { return s_.compare(pos, what.size(), what) == 0; }

  // If a `{% raw %}` tag starts at `pos`, its length (including -%}'s whitespace) and sign.
  size_t MatchRaw(size_t pos, char* sign, std::string_view word) const {
    if (!At(pos, "{%")) return 0;
    size_t p = pos + 2;
    *sign = 0;
    if (p < s_.size() && (s_[p] == '-' || s_[p] == '+')) *sign = s_[p++];
    p += WhitespaceRun(s_, p);
    if (!At(p, word)) return 0;
    p += word.size();
    p += WhitespaceRun(s_, p);
    if (At(p, "-%}")) {
      p += 3;
      p += WhitespaceRun(s_, p);
      return p - pos;
    }
    if (word == "endraw" && At(p, "+%}")) return p + 3 - pos;
    if (At(p, "%}")) {
      p += 2;
      if (word == "endraw" && p < s_.size() && s_[p] == '\n') ++p;  // trim_blocks
      return p - pos;
    }
    return 0;
  }

  // The text before a tag, with the tag's whitespace control applied.
  std::string_view ControlledText(std::string_view text, char sign, bool lstrip_applies) const {
    if (sign == '-') return RstripWhitespace(text);
    if (sign != '+' && lstrip_applies) {
      const size_t newline = text.rfind('\n');
      const size_t l_pos = newline == std::string_view::npos ? 0 : newline + 1;
      if ((l_pos > 0 || line_starting_) && AllWhitespace(text.substr(l_pos))) return text.substr(0, l_pos);
    }
    return text;
  }

  void EmitData(std::string_view original, std::string_view controlled) {
    if (!controlled.empty()) Emit(TokenType::kData, std::string(controlled));
    line_ += CountNewlines(original);
  }

  absl::Status RootStep() {
    // The earliest tag opener at or after pos_.
    size_t p = pos_;
    Opener opener = Opener::kNone;
    char sign = 0;
    size_t raw_len = 0;
    for (; p + 1 < s_.size(); ++p) {
      if (s_[p] != '{') continue;
      const char next = s_[p + 1];
      if (next == '%' && (raw_len = MatchRaw(p, &sign, "raw")) > 0) {
        opener = Opener::kRaw;
        break;
      }
      if (next == '{' || next == '%' || next == '#') {
        opener = next == '{' ? Opener::kVariable : next == '%' ? Opener::kBlock : Opener::kComment;
        sign = p + 2 < s_.size() && (s_[p + 2] == '-' || s_[p + 2] == '+') ? s_[p + 2] : 0;
        break;
      }
    }
    if (opener == Opener::kNone) {
      const std::string_view rest = std::string_view(s_).substr(pos_);
      EmitData(rest, rest);
      pos_ = s_.size();
      return absl::OkStatus();
    }
    const std::string_view text = std::string_view(s_).substr(pos_, p - pos_);
    EmitData(text, ControlledText(text, sign, opener != Opener::kVariable));
    line_starting_ = false;
    switch (opener) {
      case Opener::kRaw:
        return Raw(p, raw_len);
      case Opener::kComment:
        return Comment(p + 2 + (sign != 0));
      case Opener::kVariable:
      case Opener::kBlock:
        pos_ = p + 2 + (sign != 0);
        Emit(opener == Opener::kVariable ? TokenType::kVariableBegin : TokenType::kBlockBegin, "");
        return Tag(opener == Opener::kBlock);
      default:
        return absl::OkStatus();
    }
  }

  absl::Status Comment(size_t start) {
    for (size_t q = start; q < s_.size(); ++q) {
      size_t end = 0;
      if (At(q, "+#}")) {
        end = q + 3;
      } else if (At(q, "-#}")) {
        end = q + 3;
        end += WhitespaceRun(s_, end);
      } else if (At(q, "#}")) {
        end = q + 2;
        if (end < s_.size() && s_[end] == '\n') ++end;  // trim_blocks
      } else {
        continue;
      }
      line_ += CountNewlines(std::string_view(s_).substr(start, end - start));
      line_starting_ = s_[end - 1] == '\n';
      pos_ = end;
      return absl::OkStatus();
    }
    return SyntaxError(line_, "Missing end of comment tag");
  }

  absl::Status Raw(size_t start, size_t raw_len) {
    line_ += CountNewlines(std::string_view(s_).substr(start, raw_len));
    line_starting_ = s_[start + raw_len - 1] == '\n';
    const size_t body = start + raw_len;
    for (size_t q = body; q + 1 < s_.size(); ++q) {
      char sign = 0;
      const size_t len = s_[q] == '{' ? MatchRaw(q, &sign, "endraw") : 0;
      if (len == 0) continue;
      const std::string_view text = std::string_view(s_).substr(body, q - body);
      EmitData(text, ControlledText(text, sign, true));
      line_ += CountNewlines(std::string_view(s_).substr(q, len));
      line_starting_ = s_[q + len - 1] == '\n';
      pos_ = q + len;
      return absl::OkStatus();
    }
    return SyntaxError(line_, "Missing end of raw directive");
  }

  // Tokens inside {{ }} or {% %}, up to and including the end tag.
  absl::Status Tag(bool block) {
    std::vector<char> balance;
    while (true) {
      if (pos_ >= s_.size()) return SyntaxError(line_, "unexpected end of template");
      if (balance.empty()) {
        size_t end = 0;
        if (block) {
          if (At(pos_, "+%}")) {
            end = pos_ + 3;
          } else if (At(pos_, "-%}")) {
            end = pos_ + 3;
            end += WhitespaceRun(s_, end);
          } else if (At(pos_, "%}")) {
            end = pos_ + 2;
            if (end < s_.size() && s_[end] == '\n') ++end;  // trim_blocks
          }
        } else if (At(pos_, "-}}")) {
          end = pos_ + 3;
          end += WhitespaceRun(s_, end);
        } else if (At(pos_, "}}")) {
          end = pos_ + 2;
        }
        if (end != 0) {
          Emit(block ? TokenType::kBlockEnd : TokenType::kVariableEnd, "");
          line_ += CountNewlines(std::string_view(s_).substr(pos_, end - pos_));
          line_starting_ = s_[end - 1] == '\n';
          pos_ = end;
          return absl::OkStatus();
        }
      }
      if (const size_t ws = WhitespaceRun(s_, pos_); ws > 0) {
        line_ += CountNewlines(std::string_view(s_).substr(pos_, ws));
        pos_ += ws;
        continue;
      }
      if (size_t len = MatchFloat(); len > 0) {
        std::string digits;
        for (char c : std::string_view(s_).substr(pos_, len))
          if (c != '_') digits.push_back(c);
        Emit(TokenType::kFloat, digits);
        tokens_.back().float_value = std::strtod(digits.c_str(), nullptr);
        pos_ += len;
        continue;
      }
      if (size_t len = MatchInteger(); len > 0) {
        std::optional<int64_t> value = ParsePythonInt(std::string_view(s_).substr(pos_, len), 0);
        if (!value) return SyntaxError(line_, "integer literal too large");
        Emit(TokenType::kInteger, s_.substr(pos_, len));
        tokens_.back().int_value = *value;
        pos_ += len;
        continue;
      }
      const char c = s_[pos_];
      if (absl::ascii_isalpha(c) || c == '_') {
        size_t end = pos_ + 1;
        while (end < s_.size() && (absl::ascii_isalnum(s_[end]) || s_[end] == '_')) ++end;
        Emit(TokenType::kName, s_.substr(pos_, end - pos_));
        pos_ = end;
        continue;
      }
      if (c == '\'' || c == '"') {
        size_t end = pos_ + 1;
        while (end < s_.size() && s_[end] != c) end += s_[end] == '\\' ? 2 : 1;
        if (end < s_.size()) {
          const int line = line_;
          const std::string_view body = std::string_view(s_).substr(pos_ + 1, end - pos_ - 1);
          ASSIGN_OR_RETURN(std::string text, Unescape(body, line));
          Emit(TokenType::kString, std::move(text));
          line_ += CountNewlines(body);
          pos_ = end + 1;
          continue;
        }
      }
      bool matched = false;
      for (std::string_view op : kOperators) {
        if (!At(pos_, op)) continue;
        if (op == "(" || op == "[" || op == "{") {
          balance.push_back(op == "(" ? ')' : op == "[" ? ']' : '}');
        } else if (op == ")" || op == "]" || op == "}") {
          if (balance.empty()) return SyntaxError(line_, Cat("unexpected '", op, "'"));
          if (balance.back() != op[0])
            return SyntaxError(line_, Cat("unexpected '", op, "', expected '",
                                                   std::string(1, balance.back()), "'"));
          balance.pop_back();
        }
        Emit(TokenType::kOperator, std::string(op));
        pos_ += op.size();
        matched = true;
        break;
      }
      if (!matched) return SyntaxError(line_, Cat("unexpected char '", std::string(1, c), "'"));
    }
  }

  // Digits with single '_' separators at `p`; returns the end (p when none).
  size_t Digits(size_t p, int base = 10) const {
    auto is_digit = [&](char c) {
      return base == 10 ? absl::ascii_isdigit(c) : base == 16 ? absl::ascii_isxdigit(c)
                                                              : c >= '0' && c < '0' + base;
    };
    if (p >= s_.size() || !is_digit(s_[p])) return p;
    size_t end = p + 1;
    while (end < s_.size()) {
      if (is_digit(s_[end])) {
        ++end;
      } else if (s_[end] == '_' && end + 1 < s_.size() && is_digit(s_[end + 1])) {
        end += 2;
      } else {
        break;
      }
    }
    return end;
  }

  // jinja2's float_re: digits, then a fraction and/or an exponent; never right after a '.'.
  size_t MatchFloat() const {
    if (pos_ > 0 && s_[pos_ - 1] == '.') return 0;
    size_t p = Digits(pos_);
    if (p == pos_) return 0;
    bool fraction = false;
    if (p < s_.size() && s_[p] == '.') {
      const size_t f = Digits(p + 1);
      if (f > p + 1) {
        p = f;
        fraction = true;
      }
    }
    if (p < s_.size() && (s_[p] == 'e' || s_[p] == 'E')) {
      size_t e = p + 1;
      if (e < s_.size() && (s_[e] == '+' || s_[e] == '-')) ++e;
      const size_t d = Digits(e);
      if (d > e) return d - pos_;
    }
    return fraction ? p - pos_ : 0;
  }

  // jinja2's integer_re: 0b/0o/0x with '_' separators, decimal without leading zeros, or zeros.
  size_t MatchInteger() const {
    const size_t p = pos_;
    if (p >= s_.size() || !absl::ascii_isdigit(s_[p])) return 0;
    if (s_[p] == '0' && p + 1 < s_.size()) {
      const char k = absl::ascii_tolower(s_[p + 1]);
      const int base = k == 'b' ? 2 : k == 'o' ? 8 : k == 'x' ? 16 : 0;
      if (base != 0) {
        size_t q = p + 2;
        if (q < s_.size() && s_[q] == '_') ++q;
        const size_t end = Digits(q, base);
        if (end > q) return end - p;
      }
    }
    if (s_[p] == '0') {
      size_t end = p + 1;
      while (end < s_.size()) {
        if (s_[end] == '0') {
          ++end;
        } else if (s_[end] == '_' && end + 1 < s_.size() && s_[end + 1] == '0') {
          end += 2;
        } else {
          break;
        }
      }
      return end - p;
    }
    return Digits(p) - p;
  }

  std::string s_;
  size_t pos_ = 0;
  int line_ = 1;
  bool line_starting_ = true;
  std::vector<Token> tokens_;
};

std::string NormalizeNewlines(std::string_view source) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out.push_back('\n');
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out.push_back(source[i]);
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();  // keep_trailing_newline=False
  return out;
}

}  // namespace

absl::StatusOr<std::vector<Token>> Tokenize(std::string_view source) {
  if (!tokenizer_internal::IsValidUtf8(source))
    return TemplateError(ErrorKind::kSyntax, "template is not valid UTF-8");
  return Lexer(NormalizeNewlines(source)).Run();
}

}  // namespace llm::chat
