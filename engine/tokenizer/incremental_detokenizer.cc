// Streaming decode with the prefix / read-offset technique: decode a short window of recent ids
// twice, with and without the new ones, and emit what the new ones added. The window starts at a
// point whose text is already out, so the decoders' start-of-text rules (SentencePiece's
// leading-space strip) see the same first token in both decodes and cancel out.
#include <algorithm>
#include <string>

#include "engine/tokenizer/tokenizer.h"
#include "engine/tokenizer/utf8.h"
#include "kernels/core/status.h"

namespace llm {
namespace {

// Prompt ids kept as context before the first generated id. A few ids are enough for every
// decoder here: they only look at the first token (space stripping) and at byte runs, and a
// code point spans at most four byte tokens.
constexpr size_t kPromptContext = 6;

bool EndsWithReplacement(const std::string& text) {
  return text.ends_with(tokenizer_internal::kReplacementChar);
}

}  // namespace

IncrementalDetokenizer::IncrementalDetokenizer(const Tokenizer& tokenizer, bool skip_special_tokens)
    : tokenizer_(tokenizer), skip_special_tokens_(skip_special_tokens) {}

void IncrementalDetokenizer::SetPrefix(absl::Span<const int32_t> prompt_ids) {
  ids_.assign(prompt_ids.begin(), prompt_ids.end());
  read_offset_ = ids_.size();
  prefix_offset_ = read_offset_ - std::min(read_offset_, kPromptContext);
  // A prompt that ends inside a code point (its last byte tokens incomplete) decodes with a
  // trailing U+FFFD that the first generated ids may turn into a real character; such ids are
  // moved from the context into the text still to be emitted so the character comes out whole.
  while (read_offset_ > prefix_offset_) {
    const auto text = tokenizer_.Decode(
        absl::MakeConstSpan(ids_).subspan(prefix_offset_, read_offset_ - prefix_offset_), skip_special_tokens_);
    if (!text.ok() || !EndsWithReplacement(*text)) break;
    --read_offset_;
  }
}

absl::StatusOr<std::string> IncrementalDetokenizer::Append(int32_t id) {
  if (id < 0 || id >= tokenizer_.vocab_size()) {
    return absl::InvalidArgumentError("IncrementalDetokenizer: id out of range");
  }
  ids_.push_back(id);
  const auto ids = absl::MakeConstSpan(ids_);
  ASSIGN_OR_RETURN(const std::string prefix_text,
                   tokenizer_.Decode(ids.subspan(prefix_offset_, read_offset_ - prefix_offset_),
                                     skip_special_tokens_));
  ASSIGN_OR_RETURN(const std::string new_text,
                   tokenizer_.Decode(ids.subspan(prefix_offset_), skip_special_tokens_));
  // Hold back while the newest bytes do not yet form a whole code point (the decoders render
  // them as a trailing U+FFFD), and while the window's text has not grown past what is out.
  if (new_text.size() <= prefix_text.size() || EndsWithReplacement(new_text) ||
      !new_text.starts_with(prefix_text)) {
    return std::string();
  }
  prefix_offset_ = read_offset_;
  read_offset_ = ids_.size();
  return new_text.substr(prefix_text.size());
}

absl::StatusOr<std::string> IncrementalDetokenizer::Finish() {
  const auto ids = absl::MakeConstSpan(ids_);
  ASSIGN_OR_RETURN(const std::string prefix_text,
                   tokenizer_.Decode(ids.subspan(prefix_offset_, read_offset_ - prefix_offset_),
                                     skip_special_tokens_));
  ASSIGN_OR_RETURN(const std::string new_text,
                   tokenizer_.Decode(ids.subspan(prefix_offset_), skip_special_tokens_));
  prefix_offset_ = read_offset_ = ids_.size();
  if (new_text.size() <= prefix_text.size() || !new_text.starts_with(prefix_text)) return std::string();
  return new_text.substr(prefix_text.size());
}

}  // namespace llm
