#include "engine/tokenizer/decoder.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/tokenizer/byte_level.h"
#include "engine/tokenizer/regex.h"
#include "engine/tokenizer/utf8.h"
#include "kernels/core/status.h"

namespace llm::tokenizer_internal {
namespace {

// Maps the byte-level alphabet back to bytes across all tokens, then makes text of the bytes. A
// token with a character outside the alphabet (an added token whose text was never byte-mapped,
// e.g. one with non-ASCII letters) contributes its own UTF-8 bytes instead.
class ByteLevelDecoder : public Decoder {
 public:
  absl::Status DecodeChain(std::vector<std::string>* tokens) const override {
    const ByteLevelAlphabet& alphabet = ByteLevelAlphabet::Get();
    std::string bytes;
    std::string token_bytes;
    for (const std::string& token : *tokens) {
      token_bytes.clear();
      bool in_alphabet = true;
      size_t pos = 0;
      while (pos < token.size()) {
        const int byte = alphabet.DecodeCodePoint(DecodeCodePoint(token, &pos));
        if (byte < 0) {
          in_alphabet = false;
          break;
        }
        token_bytes.push_back(static_cast<char>(byte));
      }
      bytes += in_alphabet ? token_bytes : token;
    }
    tokens->assign(1, Utf8Lossy(bytes));
    return absl::OkStatus();
  }
};

class ReplaceDecoder : public Decoder {
 public:
  ReplaceDecoder(std::string literal, std::unique_ptr<Regex> regex, std::string content)
      : literal_(std::move(literal)), regex_(std::move(regex)), content_(std::move(content)) {}

  absl::Status DecodeChain(std::vector<std::string>* tokens) const override {
    Regex::Matches matches;
    for (std::string& token : *tokens) {
      if (regex_ != nullptr) {
        RETURN_IF_ERROR(regex_->FindAll(token, &matches));
      } else {
        matches.clear();
        if (!literal_.empty()) {
          for (size_t pos = token.find(literal_); pos != std::string::npos;
               pos = token.find(literal_, pos + literal_.size())) {
            matches.emplace_back(pos, pos + literal_.size());
          }
        }
      }
      if (matches.empty()) continue;
      std::string out;
      size_t previous = 0;
      for (const auto& [begin, end] : matches) {
        out.append(token, previous, begin - previous);
        out += content_;
        previous = end;
      }
      out.append(token, previous, std::string::npos);
      token = std::move(out);
    }
    return absl::OkStatus();
  }

 private:
  std::string literal_;
  std::unique_ptr<Regex> regex_;
  std::string content_;
};

// "<0xAB>" tokens become bytes; a run of them that is not valid UTF-8 becomes one U+FFFD per byte
// (not per maximal subpart: this is the reference's rule here, unlike from_utf8_lossy).
class ByteFallbackDecoder : public Decoder {
 public:
  absl::Status DecodeChain(std::vector<std::string>* tokens) const override {
    std::vector<std::string> out;
    out.reserve(tokens->size());
    std::string pending;
    const auto flush = [&] {
      if (pending.empty()) return;
      if (IsValidUtf8(pending)) {
        out.push_back(pending);
      } else {
        for (size_t i = 0; i < pending.size(); ++i) out.emplace_back(kReplacementChar);
      }
      pending.clear();
    };
    for (std::string& token : *tokens) {
      if (const int byte = ParseByteToken(token); byte >= 0) {
        pending.push_back(static_cast<char>(byte));
        continue;
      }
      flush();
      out.push_back(std::move(token));
    }
    flush();
    *tokens = std::move(out);
    return absl::OkStatus();
  }

 private:
  static int HexDigit(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  }
  static int ParseByteToken(const std::string& token) {
    if (token.size() != 6 || !token.starts_with("<0x") || token.back() != '>') return -1;
    const int high = HexDigit(token[3]), low = HexDigit(token[4]);
    return high < 0 || low < 0 ? -1 : high * 16 + low;
  }
};

class FuseDecoder : public Decoder {
 public:
  absl::Status DecodeChain(std::vector<std::string>* tokens) const override {
    std::string fused;
    for (const std::string& token : *tokens) fused += token;
    tokens->assign(1, std::move(fused));
    return absl::OkStatus();
  }
};

// Removes up to `start` leading and `stop` trailing copies of one character from every token.
class StripDecoder : public Decoder {
 public:
  StripDecoder(std::string content, int start, int stop)
      : content_(std::move(content)), start_(start), stop_(stop) {}
  absl::Status DecodeChain(std::vector<std::string>* tokens) const override {
    for (std::string& token : *tokens) {
      size_t begin = 0, end = token.size();
      for (int i = 0; i < start_ && token.compare(begin, content_.size(), content_) == 0 && begin < end; ++i) {
        begin += content_.size();
      }
      for (int i = 0; i < stop_ && end - begin >= content_.size() &&
                      token.compare(end - content_.size(), content_.size(), content_) == 0;
           ++i) {
        end -= content_.size();
      }
      token = token.substr(begin, end - begin);
    }
    return absl::OkStatus();
  }

 private:
  std::string content_;  // one character
  int start_, stop_;
};

// "▁" back to spaces; in the first token they are dropped when the encoder prepended one.
class MetaspaceDecoder : public Decoder {
 public:
  MetaspaceDecoder(std::string replacement, bool prepended)
      : replacement_(std::move(replacement)), prepended_(prepended) {}
  absl::Status DecodeChain(std::vector<std::string>* tokens) const override {
    for (size_t i = 0; i < tokens->size(); ++i) {
      std::string& token = (*tokens)[i];
      std::string out;
      for (size_t pos = 0; pos < token.size();) {
        if (token.compare(pos, replacement_.size(), replacement_) == 0) {
          if (!(i == 0 && prepended_)) out += ' ';
          pos += replacement_.size();
        } else {
          out += token[pos++];
        }
      }
      token = std::move(out);
    }
    return absl::OkStatus();
  }

 private:
  std::string replacement_;
  bool prepended_;
};

class SequenceDecoder : public Decoder {
 public:
  explicit SequenceDecoder(std::vector<std::unique_ptr<Decoder>> steps) : steps_(std::move(steps)) {}
  absl::Status DecodeChain(std::vector<std::string>* tokens) const override {
    for (const auto& step : steps_) RETURN_IF_ERROR(step->DecodeChain(tokens));
    return absl::OkStatus();
  }

 private:
  std::vector<std::unique_ptr<Decoder>> steps_;
};

absl::StatusOr<std::string> SingleCharacter(const Json& config, std::string_view key, std::string fallback) {
  ASSIGN_OR_RETURN(std::string value, GetStringOr(config, key, std::move(fallback)));
  size_t pos = 0;
  if (value.empty() || !IsValidUtf8(value) || (DecodeCodePoint(value, &pos), pos != value.size())) {
    return absl::InvalidArgumentError(absl::StrCat("decoder field \"", std::string(key), "\" must be one character"));
  }
  return value;
}

absl::StatusOr<std::unique_ptr<Decoder>> MakeMetaspace(const Json& config) {
  ASSIGN_OR_RETURN(std::string replacement, SingleCharacter(config, "replacement", "\xE2\x96\x81"));
  ASSIGN_OR_RETURN(const bool add_prefix_space, GetBoolOr(config, "add_prefix_space", true));
  ASSIGN_OR_RETURN(const std::string scheme,
                   GetStringOr(config, "prepend_scheme", add_prefix_space ? "always" : "never"));
  if (scheme != "always" && scheme != "first" && scheme != "never") {
    return absl::InvalidArgumentError(absl::StrCat("unknown Metaspace prepend_scheme \"", scheme, "\""));
  }
  return std::make_unique<MetaspaceDecoder>(std::move(replacement), scheme != "never");
}

absl::StatusOr<int> GetCount(const Json& config, std::string_view key) {
  ASSIGN_OR_RETURN(const int64_t value, GetInt(config, key));
  if (value < 0 || value > 1 << 20) return absl::InvalidArgumentError("Strip decoder count out of range");
  return static_cast<int>(value);
}

}  // namespace

absl::StatusOr<std::unique_ptr<Decoder>> DecoderFromJson(const Json& config) {
  if (config.is_null()) return nullptr;
  ASSIGN_OR_RETURN(const std::string type, ComponentType(config, "decoder"));
  if (type == "ByteLevel") return std::make_unique<ByteLevelDecoder>();
  if (type == "Replace") {
    ASSIGN_OR_RETURN(const PatternSpec pattern, GetPattern(config, "pattern"));
    ASSIGN_OR_RETURN(std::string content, GetString(config, "content"));
    std::unique_ptr<Regex> regex;
    if (pattern.is_regex) {
      ASSIGN_OR_RETURN(regex, Regex::Compile(pattern.text));
    }
    return std::make_unique<ReplaceDecoder>(pattern.text, std::move(regex), std::move(content));
  }
  if (type == "ByteFallback") return std::make_unique<ByteFallbackDecoder>();
  if (type == "Fuse") return std::make_unique<FuseDecoder>();
  if (type == "Strip") {
    ASSIGN_OR_RETURN(std::string content, SingleCharacter(config, "content", " "));
    ASSIGN_OR_RETURN(const int start, GetCount(config, "start"));
    ASSIGN_OR_RETURN(const int stop, GetCount(config, "stop"));
    return std::make_unique<StripDecoder>(std::move(content), start, stop);
  }
  if (type == "Metaspace") return MakeMetaspace(config);
  if (type == "Sequence") {
    ASSIGN_OR_RETURN(const Json* list, GetArray(config, "decoders"));
    std::vector<std::unique_ptr<Decoder>> steps;
    for (const Json& step : *list) {
      ASSIGN_OR_RETURN(std::unique_ptr<Decoder> decoder, DecoderFromJson(step));
      if (decoder != nullptr) steps.push_back(std::move(decoder));
    }
    return std::make_unique<SequenceDecoder>(std::move(steps));
  }
  return absl::UnimplementedError(absl::StrCat("unsupported decoder type \"", type, "\""));
}

}  // namespace llm::tokenizer_internal
