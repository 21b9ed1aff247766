#include "engine/tokenizer/pre_tokenizer.h"

#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "engine/tokenizer/byte_level.h"
#include "engine/tokenizer/regex.h"
#include "engine/tokenizer/utf8.h"
#include "kernels/core/status.h"

namespace llm::tokenizer_internal {
namespace {

// GPT-2's word pattern, which ByteLevel applies when use_regex is set.
constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// Splits every piece at the matches of a regex.
absl::Status SplitByRegex(const Regex& regex, bool invert, SplitBehavior behavior, PreTokens* pieces) {
  PreTokens out;
  out.reserve(pieces->size() * 4);
  Regex::Matches matches;
  for (const PreToken& piece : *pieces) {
    RETURN_IF_ERROR(regex.FindAll(piece.text, &matches));
    SplitPiece(piece, SegmentsFromMatches(piece.text.size(), matches, invert), behavior, &out);
  }
  *pieces = std::move(out);
  return absl::OkStatus();
}

template <typename Predicate>
void SplitByCodePoint(Predicate is_delimiter, SplitBehavior behavior, PreTokens* pieces) {
  PreTokens out;
  out.reserve(pieces->size() * 4);
  for (const PreToken& piece : *pieces) {
    SplitPiece(piece, SegmentsFromCodePoints(piece.text, is_delimiter, /*invert=*/false), behavior, &out);
  }
  *pieces = std::move(out);
}

class SplitPreTokenizer : public PreTokenizer {
 public:
  SplitPreTokenizer(std::unique_ptr<Regex> regex, SplitBehavior behavior, bool invert)
      : regex_(std::move(regex)), behavior_(behavior), invert_(invert) {}
  absl::Status PreTokenize(PreTokens* pieces) const override {
    return SplitByRegex(*regex_, invert_, behavior_, pieces);
  }
  bool DropsText() const override { return behavior_ == SplitBehavior::kRemoved; }

 private:
  std::unique_ptr<Regex> regex_;
  SplitBehavior behavior_;
  bool invert_;
};

class ByteLevelPreTokenizer : public PreTokenizer {
 public:
  ByteLevelPreTokenizer(bool add_prefix_space, std::unique_ptr<Regex> regex)
      : add_prefix_space_(add_prefix_space), regex_(std::move(regex)) {}

  absl::Status PreTokenize(PreTokens* pieces) const override {
    if (add_prefix_space_) {
      for (PreToken& piece : *pieces) {
        if (!piece.text.starts_with(' ')) piece.text.insert(piece.text.begin(), ' ');
      }
    }
    if (regex_ != nullptr) {
      RETURN_IF_ERROR(SplitByRegex(*regex_, /*invert=*/false, SplitBehavior::kIsolated, pieces));
    }
    const ByteLevelAlphabet& alphabet = ByteLevelAlphabet::Get();
    std::string mapped;
    for (PreToken& piece : *pieces) {
      mapped.clear();
      alphabet.Encode(piece.text, &mapped);
      piece.text.swap(mapped);
    }
    return absl::OkStatus();
  }

 private:
  bool add_prefix_space_;
  std::unique_ptr<Regex> regex_;  // the GPT-2 pattern when use_regex, else null
};

enum class PrependScheme { kAlways, kFirst, kNever };

class MetaspacePreTokenizer : public PreTokenizer {
 public:
  MetaspacePreTokenizer(std::string replacement, PrependScheme scheme, bool split)
      : replacement_(std::move(replacement)), scheme_(scheme), split_(split) {}

  absl::Status PreTokenize(PreTokens* pieces) const override {
    for (PreToken& piece : *pieces) {
      std::string replaced;
      replaced.reserve(piece.text.size() + replacement_.size());
      for (char c : piece.text) {
        if (c == ' ') {
          replaced += replacement_;
        } else {
          replaced += c;
        }
      }
      const bool prepend = scheme_ == PrependScheme::kAlways || (scheme_ == PrependScheme::kFirst && piece.at_origin);
      if (prepend && !replaced.starts_with(replacement_)) replaced.insert(0, replacement_);
      piece.text = std::move(replaced);
    }
    if (!split_) return absl::OkStatus();
    // Each "▁" starts a new piece and stays attached to what follows it.
    PreTokens out;
    for (const PreToken& piece : *pieces) {
      std::vector<std::pair<size_t, size_t>> matches;
      for (size_t pos = piece.text.find(replacement_); pos != std::string::npos;
           pos = piece.text.find(replacement_, pos + replacement_.size())) {
        matches.emplace_back(pos, pos + replacement_.size());
      }
      SplitPiece(piece, SegmentsFromMatches(piece.text.size(), matches, false), SplitBehavior::kMergedWithNext,
                 &out);
    }
    *pieces = std::move(out);
    return absl::OkStatus();
  }

 private:
  std::string replacement_;
  PrependScheme scheme_;
  bool split_;
};

class DigitsPreTokenizer : public PreTokenizer {
 public:
  explicit DigitsPreTokenizer(bool individual) : individual_(individual) {}
  absl::Status PreTokenize(PreTokens* pieces) const override {
    SplitByCodePoint(IsNumeric, individual_ ? SplitBehavior::kIsolated : SplitBehavior::kContiguous, pieces);
    return absl::OkStatus();
  }

 private:
  bool individual_;
};

class WhitespaceSplitPreTokenizer : public PreTokenizer {
 public:
  absl::Status PreTokenize(PreTokens* pieces) const override {
    SplitByCodePoint(IsWhitespace, SplitBehavior::kRemoved, pieces);
    return absl::OkStatus();
  }
  bool DropsText() const override { return true; }
};

class SequencePreTokenizer : public PreTokenizer {
 public:
  explicit SequencePreTokenizer(std::vector<std::unique_ptr<PreTokenizer>> steps) : steps_(std::move(steps)) {}
  absl::Status PreTokenize(PreTokens* pieces) const override {
    for (const auto& step : steps_) RETURN_IF_ERROR(step->PreTokenize(pieces));
    return absl::OkStatus();
  }
  bool DropsText() const override {
    for (const auto& step : steps_)
      if (step->DropsText()) return true;
    return false;
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> steps_;
};

absl::StatusOr<std::unique_ptr<PreTokenizer>> MakeSplit(const Json& config) {
  ASSIGN_OR_RETURN(const PatternSpec pattern, GetPattern(config, "pattern"));
  ASSIGN_OR_RETURN(const std::string behavior_name, GetString(config, "behavior"));
  ASSIGN_OR_RETURN(const SplitBehavior behavior, ParseSplitBehavior(behavior_name));
  ASSIGN_OR_RETURN(const bool invert, GetBoolOr(config, "invert", false));
  std::unique_ptr<Regex> regex;
  if (pattern.is_regex) {
    ASSIGN_OR_RETURN(regex, Regex::Compile(pattern.text));
  } else {
    ASSIGN_OR_RETURN(regex, Regex::CompileLiteral(pattern.text));
  }
  return std::make_unique<SplitPreTokenizer>(std::move(regex), behavior, invert);
}

absl::StatusOr<std::unique_ptr<PreTokenizer>> MakeMetaspace(const Json& config) {
  ASSIGN_OR_RETURN(std::string replacement, GetStringOr(config, "replacement", "\xE2\x96\x81"));
  size_t pos = 0;
  if (replacement.empty() || (DecodeCodePoint(replacement, &pos), pos != replacement.size())) {
    return absl::InvalidArgumentError("Metaspace replacement must be a single character");
  }
  // Older files carry add_prefix_space instead of prepend_scheme.
  ASSIGN_OR_RETURN(const bool add_prefix_space, GetBoolOr(config, "add_prefix_space", true));
  ASSIGN_OR_RETURN(const std::string scheme_name,
                   GetStringOr(config, "prepend_scheme", add_prefix_space ? "always" : "never"));
  PrependScheme scheme;
  if (scheme_name == "always") {
    scheme = PrependScheme::kAlways;
  } else if (scheme_name == "first") {
    scheme = PrependScheme::kFirst;
  } else if (scheme_name == "never") {
    scheme = PrependScheme::kNever;
  } else {
    return absl::InvalidArgumentError(absl::StrCat("unknown Metaspace prepend_scheme \"", scheme_name, "\""));
  }
  ASSIGN_OR_RETURN(const bool split, GetBoolOr(config, "split", true));
  return std::make_unique<MetaspacePreTokenizer>(std::move(replacement), scheme, split);
}

}  // namespace

absl::StatusOr<std::unique_ptr<PreTokenizer>> PreTokenizerFromJson(const Json& config) {
  if (config.is_null()) return nullptr;
  ASSIGN_OR_RETURN(const std::string type, ComponentType(config, "pre_tokenizer"));
  if (type == "Split") return MakeSplit(config);
  if (type == "ByteLevel") {
    ASSIGN_OR_RETURN(const bool add_prefix_space, GetBoolOr(config, "add_prefix_space", true));
    ASSIGN_OR_RETURN(const bool use_regex, GetBoolOr(config, "use_regex", true));
    std::unique_ptr<Regex> regex;
    if (use_regex) {
      ASSIGN_OR_RETURN(regex, Regex::Compile(kGpt2Pattern));
    }
    return std::make_unique<ByteLevelPreTokenizer>(add_prefix_space, std::move(regex));
  }
  if (type == "Metaspace") return MakeMetaspace(config);
  if (type == "Digits") {
    ASSIGN_OR_RETURN(const bool individual, GetBoolOr(config, "individual_digits", false));
    return std::make_unique<DigitsPreTokenizer>(individual);
  }
  if (type == "Whitespace") {
    ASSIGN_OR_RETURN(std::unique_ptr<Regex> regex, Regex::Compile(R"(\w+|[^\w\s]+)"));
    return std::make_unique<SplitPreTokenizer>(std::move(regex), SplitBehavior::kRemoved, /*invert=*/true);
  }
  if (type == "WhitespaceSplit") return std::make_unique<WhitespaceSplitPreTokenizer>();
  if (type == "Sequence") {
    ASSIGN_OR_RETURN(const Json* list, GetArray(config, "pretokenizers"));
    std::vector<std::unique_ptr<PreTokenizer>> steps;
    for (const Json& step : *list) {
      ASSIGN_OR_RETURN(std::unique_ptr<PreTokenizer> pre_tokenizer, PreTokenizerFromJson(step));
      if (pre_tokenizer != nullptr) steps.push_back(std::move(pre_tokenizer));
    }
    return std::make_unique<SequencePreTokenizer>(std::move(steps));
  }
  return absl::UnimplementedError(absl::StrCat("unsupported pre_tokenizer type \"", type, "\""));
}

}  // namespace llm::tokenizer_internal
