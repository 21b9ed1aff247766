#include "engine/tokenizer/added_vocabulary.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/tokenizer/utf8.h"
#include "kernels/core/status.h"

namespace llm::tokenizer_internal {
namespace {

// The code point that ends at `end` (exclusive) of valid UTF-8 `text`; `end` > 0.
char32_t CodePointBefore(std::string_view text, size_t end, size_t* begin) {
  size_t at = end - 1;
  while (at > 0 && (static_cast<unsigned char>(text[at]) & 0xC0) == 0x80) --at;
  *begin = at;
  size_t pos = at;
  return DecodeCodePoint(text, &pos);
}

// Start of the whitespace run that ends `text` (text.size() when there is none).
size_t TrailingSpaceStart(std::string_view text) {
  size_t end = text.size();
  while (end > 0) {
    size_t begin;
    if (!IsWhitespace(CodePointBefore(text, end, &begin))) break;
    end = begin;
  }
  return end;
}

// Length of the whitespace run that starts `text`.
size_t LeadingSpaceLength(std::string_view text) {
  size_t pos = 0;
  while (pos < text.size()) {
    size_t next = pos;
    if (!IsWhitespace(DecodeCodePoint(text, &next))) break;
    pos = next;
  }
  return pos;
}

bool EndsWithWordChar(std::string_view text) {
  if (text.empty()) return false;
  size_t begin;
  return IsWordChar(CodePointBefore(text, text.size(), &begin));
}

bool StartsWithWordChar(std::string_view text) {
  if (text.empty()) return false;
  size_t pos = 0;
  return IsWordChar(DecodeCodePoint(text, &pos));
}

}  // namespace

AddedTokenMatcher::AddedTokenMatcher(std::vector<AddedToken> tokens) : tokens_(std::move(tokens)) {
  trie_.emplace_back();
  for (size_t t = 0; t < tokens_.size(); ++t) {
    const std::string& content = tokens_[t].content;
    if (content.empty()) continue;
    first_byte_[static_cast<unsigned char>(content[0])] = true;
    int32_t node = 0;
    for (unsigned char byte : content) {
      auto& children = trie_[node].children;
      auto it = std::lower_bound(children.begin(), children.end(), std::make_pair(byte, int32_t{-1}));
      if (it != children.end() && it->first == byte) {
        node = it->second;
        continue;
      }
      const int32_t child = static_cast<int32_t>(trie_.size());
      children.insert(it, {byte, child});
      trie_.emplace_back();  // may reallocate: `children` is not used past this point
      node = child;
    }
    trie_[node].token = static_cast<int32_t>(t);
  }
}

int32_t AddedTokenMatcher::LongestAt(std::string_view text, size_t pos, size_t* end) const {
  int32_t found = -1;
  int32_t node = 0;
  for (size_t i = pos; i < text.size(); ++i) {
    const auto& children = trie_[node].children;
    const unsigned char byte = static_cast<unsigned char>(text[i]);
    auto it = std::lower_bound(children.begin(), children.end(), std::make_pair(byte, int32_t{-1}));
    if (it == children.end() || it->first != byte) break;
    node = it->second;
    if (trie_[node].token >= 0) {
      found = trie_[node].token;
      *end = i + 1;
    }
  }
  return found;
}

std::vector<InputSplit> AddedTokenMatcher::Split(std::string_view text) const {
  std::vector<InputSplit> splits;
  size_t covered = 0;  // text before this is already in `splits`
  size_t search = 0;   // where the next match may start
  while (!tokens_.empty() && search < text.size()) {
    // Leftmost, then longest, match at or after `search`.
    size_t begin = search, end = 0;
    int32_t token = -1;
    for (; begin < text.size(); ++begin) {
      if (!first_byte_[static_cast<unsigned char>(text[begin])]) continue;
      token = LongestAt(text, begin, &end);
      if (token >= 0) break;
    }
    if (token < 0) break;
    search = end;
    const AddedToken& added = tokens_[token];
    if (begin < covered) continue;  // inside text an rstrip already claimed
    if (added.single_word &&
        (EndsWithWordChar(text.substr(0, begin)) || StartsWithWordChar(text.substr(end)))) {
      continue;
    }
    if (added.lstrip) begin = std::max(TrailingSpaceStart(text.substr(0, begin)), covered);
    if (added.rstrip) end += LeadingSpaceLength(text.substr(end));
    if (covered < begin) splits.push_back({std::nullopt, covered, begin});
    splits.push_back({added.id, begin, end});
    covered = end;
    search = std::max(search, end);
  }
  if (covered < text.size()) splits.push_back({std::nullopt, covered, text.size()});
  return splits;
}

absl::StatusOr<AddedVocabulary> AddedVocabulary::FromJson(const Json& added_tokens) {
  AddedVocabulary vocabulary;
  if (added_tokens.is_null()) return vocabulary;
  if (!added_tokens.is_array()) return absl::InvalidArgumentError("tokenizer.json: added_tokens must be an array");
  for (const Json& entry : added_tokens) {
    AddedToken token;
    ASSIGN_OR_RETURN(const int64_t id, GetInt(entry, "id"));
    if (id < 0 || id >= INT32_MAX) return absl::InvalidArgumentError("tokenizer.json: added token id out of range");
    token.id = static_cast<int32_t>(id);
    ASSIGN_OR_RETURN(token.content, GetString(entry, "content"));
    ASSIGN_OR_RETURN(token.special, GetBoolOr(entry, "special", false));
    ASSIGN_OR_RETURN(token.lstrip, GetBoolOr(entry, "lstrip", false));
    ASSIGN_OR_RETURN(token.rstrip, GetBoolOr(entry, "rstrip", false));
    ASSIGN_OR_RETURN(token.single_word, GetBoolOr(entry, "single_word", false));
    // The reference's default: special tokens match raw text, others normalized text.
    ASSIGN_OR_RETURN(token.normalized, GetBoolOr(entry, "normalized", !token.special));
    if (!IsValidUtf8(token.content)) return absl::InvalidArgumentError("tokenizer.json: added token is not UTF-8");
    vocabulary.max_id_ = std::max(vocabulary.max_id_, token.id);
    vocabulary.by_id_[token.id] = vocabulary.tokens_.size();
    vocabulary.by_content_[token.content] = vocabulary.tokens_.size();
    vocabulary.tokens_.push_back(std::move(token));
  }
  std::vector<AddedToken> raw, normalized;
  for (const AddedToken& token : vocabulary.tokens_) (token.normalized ? normalized : raw).push_back(token);
  vocabulary.raw_matcher_ = AddedTokenMatcher(std::move(raw));
  vocabulary.normalized_matcher_ = AddedTokenMatcher(std::move(normalized));
  return vocabulary;
}

const AddedToken* AddedVocabulary::FindById(int32_t id) const {
  const auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : &tokens_[it->second];
}

const AddedToken* AddedVocabulary::FindByContent(std::string_view content) const {
  const auto it = by_content_.find(absl::string_view(content.data(), content.size()));
  return it == by_content_.end() ? nullptr : &tokens_[it->second];
}

}  // namespace llm::tokenizer_internal
