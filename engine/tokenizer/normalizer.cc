#include "engine/tokenizer/normalizer.h"

#include <unicode/bytestream.h>
#include <unicode/normalizer2.h>
#include <unicode/stringpiece.h>
#include <unicode/ucasemap.h>

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/tokenizer/regex.h"
#include "engine/tokenizer/utf8.h"
#include "kernels/core/status.h"

namespace llm::tokenizer_internal {
namespace {

bool IsAscii(const std::string& text) {
  for (unsigned char c : text) {
    if (c >= 0x80) return false;
  }
  return true;
}

// NFC / NFD / NFKC / NFKD through ICU, working on UTF-8 directly.
class UnicodeNormalizer : public Normalizer {
 public:
  explicit UnicodeNormalizer(const icu::Normalizer2* normalizer) : normalizer_(normalizer) {}

  absl::Status Normalize(std::string* text) const override {
    // ASCII is invariant under all four forms, and is most of the text of most prompts.
    if (IsAscii(*text)) return absl::OkStatus();
    UErrorCode status = U_ZERO_ERROR;
    if (normalizer_->isNormalizedUTF8(icu::StringPiece(text->data(), text->size()), status) &&
        U_SUCCESS(status)) {
      return absl::OkStatus();
    }
    status = U_ZERO_ERROR;
    std::string normalized;
    icu::StringByteSink<std::string> sink(&normalized, static_cast<int32_t>(text->size()));
    normalizer_->normalizeUTF8(0, icu::StringPiece(text->data(), text->size()), sink, nullptr, status);
    if (U_FAILURE(status)) {
      return absl::InternalError(absl::StrCat("ICU normalization failed: ", u_errorName(status)));
    }
    *text = std::move(normalized);
    return absl::OkStatus();
  }
  // Composition and compatibility mappings: a Hangul syllable from three jamo (9 bytes -> 3), a
  // mathematical letter to ASCII (4 -> 1).
  std::optional<double> MaxShrink() const override { return 4.0; }

 private:
  const icu::Normalizer2* normalizer_;  // owned by ICU
};

class PrependNormalizer : public Normalizer {
 public:
  explicit PrependNormalizer(std::string prefix) : prefix_(std::move(prefix)) {}
  absl::Status Normalize(std::string* text) const override {
    if (!text->empty()) text->insert(0, prefix_);  // the reference leaves empty text empty
    return absl::OkStatus();
  }
  std::optional<double> MaxShrink() const override { return 1.0; }

 private:
  std::string prefix_;
};

class ReplaceNormalizer : public Normalizer {
 public:
  ReplaceNormalizer(std::string literal, std::unique_ptr<Regex> regex, std::string content)
      : literal_(std::move(literal)), regex_(std::move(regex)), content_(std::move(content)) {}

  absl::Status Normalize(std::string* text) const override {
    std::string out;
    size_t previous = 0;
    const auto replace = [&](size_t begin, size_t end) {
      out.append(*text, previous, begin - previous);
      out.append(content_);
      previous = end;
    };
    if (regex_ != nullptr) {
      Regex::Matches matches;
      RETURN_IF_ERROR(regex_->FindAll(*text, &matches));
      if (matches.empty()) return absl::OkStatus();
      for (const auto& [begin, end] : matches) replace(begin, end);
    } else {
      if (literal_.empty()) return absl::OkStatus();
      size_t pos = text->find(literal_);
      if (pos == std::string::npos) return absl::OkStatus();
      for (; pos != std::string::npos; pos = text->find(literal_, pos + literal_.size())) {
        replace(pos, pos + literal_.size());
      }
    }
    out.append(*text, previous, std::string::npos);
    *text = std::move(out);
    return absl::OkStatus();
  }
  // A literal replaced by content no shorter keeps the size; a regex may match any amount.
  std::optional<double> MaxShrink() const override {
    if (regex_ != nullptr || literal_.empty()) return regex_ != nullptr ? std::nullopt : std::optional<double>(1.0);
    if (content_.empty()) return std::nullopt;
    return std::max(1.0, static_cast<double>(literal_.size()) / static_cast<double>(content_.size()));
  }

 private:
  std::string literal_;
  std::unique_ptr<Regex> regex_;  // set for a Regex pattern, else `literal_` is used
  std::string content_;
};

class StripNormalizer : public Normalizer {
 public:
  StripNormalizer(bool left, bool right) : left_(left), right_(right) {}
  absl::Status Normalize(std::string* text) const override {
    size_t begin = 0, end = text->size();
    if (left_) {
      size_t pos = 0;
      while (pos < end) {
        const size_t at = pos;
        if (!IsWhitespace(DecodeCodePoint(*text, &pos))) {
          pos = at;
          break;
        }
      }
      begin = pos;
    }
    if (right_) {
      while (end > begin) {
        size_t at = end - 1;
        while (at > begin && (static_cast<unsigned char>((*text)[at]) & 0xC0) == 0x80) --at;
        size_t pos = at;
        if (!IsWhitespace(DecodeCodePoint(*text, &pos))) break;
        end = at;
      }
    }
    *text = text->substr(begin, end - begin);
    return absl::OkStatus();
  }

 private:
  bool left_, right_;
};

class LowercaseNormalizer : public Normalizer {
 public:
  absl::Status Normalize(std::string* text) const override {
    if (IsAscii(*text)) {
      for (char& c : *text) {
        if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
      }
      return absl::OkStatus();
    }
    UErrorCode status = U_ZERO_ERROR;
    UCaseMap* map = ucasemap_open("", 0, &status);
    if (U_FAILURE(status)) return absl::InternalError("ICU ucasemap_open failed");
    std::string out(text->size() * 3 + 16, '\0');
    const int32_t length = ucasemap_utf8ToLower(map, out.data(), static_cast<int32_t>(out.size()), text->data(),
                                                static_cast<int32_t>(text->size()), &status);
    ucasemap_close(map);
    if (U_FAILURE(status)) return absl::InternalError("ICU lowercasing failed");
    out.resize(length);
    *text = std::move(out);
    return absl::OkStatus();
  }
  // A 3-byte letter can fold to a 1-byte one (the Kelvin sign to 'k').
  std::optional<double> MaxShrink() const override { return 3.0; }
};

class SequenceNormalizer : public Normalizer {
 public:
  explicit SequenceNormalizer(std::vector<std::unique_ptr<Normalizer>> steps) : steps_(std::move(steps)) {}
  absl::Status Normalize(std::string* text) const override {
    for (const auto& step : steps_) RETURN_IF_ERROR(step->Normalize(text));
    return absl::OkStatus();
  }
  std::optional<double> MaxShrink() const override {
    double shrink = 1.0;
    for (const auto& step : steps_) {
      const std::optional<double> s = step->MaxShrink();
      if (!s) return std::nullopt;
      shrink *= *s;
    }
    return shrink;
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> steps_;
};

absl::StatusOr<std::unique_ptr<Normalizer>> MakeUnicodeNormalizer(const std::string& type) {
  UErrorCode status = U_ZERO_ERROR;
  const icu::Normalizer2* normalizer = nullptr;
  if (type == "NFC") normalizer = icu::Normalizer2::getNFCInstance(status);
  if (type == "NFD") normalizer = icu::Normalizer2::getNFDInstance(status);
  if (type == "NFKC") normalizer = icu::Normalizer2::getNFKCInstance(status);
  if (type == "NFKD") normalizer = icu::Normalizer2::getNFKDInstance(status);
  if (normalizer == nullptr || U_FAILURE(status)) {
    return absl::InternalError(absl::StrCat("ICU has no ", type, " normalizer: ", u_errorName(status)));
  }
  return std::make_unique<UnicodeNormalizer>(normalizer);
}

}  // namespace

absl::StatusOr<std::unique_ptr<Normalizer>> NormalizerFromJson(const Json& config) {
  if (config.is_null()) return nullptr;
  ASSIGN_OR_RETURN(const std::string type, ComponentType(config, "normalizer"));
  if (type == "NFC" || type == "NFD" || type == "NFKC" || type == "NFKD") return MakeUnicodeNormalizer(type);
  if (type == "Prepend") {
    ASSIGN_OR_RETURN(std::string prefix, GetString(config, "prepend"));
    return std::make_unique<PrependNormalizer>(std::move(prefix));
  }
  if (type == "Replace") {
    ASSIGN_OR_RETURN(const PatternSpec pattern, GetPattern(config, "pattern"));
    ASSIGN_OR_RETURN(std::string content, GetString(config, "content"));
    std::unique_ptr<Regex> regex;
    if (pattern.is_regex) {
      ASSIGN_OR_RETURN(regex, Regex::Compile(pattern.text));
    }
    return std::make_unique<ReplaceNormalizer>(pattern.text, std::move(regex), std::move(content));
  }
  if (type == "Strip") {
    ASSIGN_OR_RETURN(const bool left, GetBoolOr(config, "strip_left", true));
    ASSIGN_OR_RETURN(const bool right, GetBoolOr(config, "strip_right", true));
    return std::make_unique<StripNormalizer>(left, right);
  }
  if (type == "Lowercase") return std::make_unique<LowercaseNormalizer>();
  if (type == "Sequence") {
    ASSIGN_OR_RETURN(const Json* list, GetArray(config, "normalizers"));
    std::vector<std::unique_ptr<Normalizer>> steps;
    for (const Json& step : *list) {
      ASSIGN_OR_RETURN(std::unique_ptr<Normalizer> normalizer, NormalizerFromJson(step));
      if (normalizer != nullptr) steps.push_back(std::move(normalizer));
    }
    return std::make_unique<SequenceNormalizer>(std::move(steps));
  }
  return absl::UnimplementedError(absl::StrCat("unsupported normalizer type \"", type, "\""));
}

}  // namespace llm::tokenizer_internal
