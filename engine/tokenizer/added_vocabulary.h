// Added tokens (special or not): found in the input before anything else runs, so that e.g.
// "<|im_start|>" is one id however the model would have split it. Matching is leftmost-longest
// with the lstrip / rstrip / single_word options of the reference library.
#pragma once

#include <array>
#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "engine/tokenizer/json_util.h"

namespace llm::tokenizer_internal {

struct AddedToken {
  int32_t id = 0;
  std::string content;
  bool special = false;
  bool lstrip = false;
  bool rstrip = false;
  bool single_word = false;
  bool normalized = false;  // matched against normalized text rather than the raw input
};

// A piece of input: either an added token's id, or text for the normal pipeline.
struct InputSplit {
  std::optional<int32_t> token_id;
  size_t begin;  // byte range in the text that was split
  size_t end;
};

// Finds the added tokens of one kind (raw or normalized) in text.
class AddedTokenMatcher {
 public:
  AddedTokenMatcher() = default;
  explicit AddedTokenMatcher(std::vector<AddedToken> tokens);

  bool empty() const { return tokens_.empty(); }
  // Covers `text` with token matches and the text between them (which may be empty: none).
  std::vector<InputSplit> Split(std::string_view text) const;

 private:
  struct Node {
    std::vector<std::pair<unsigned char, int32_t>> children;  // byte -> node index, sorted
    int32_t token = -1;                                       // index into tokens_ when a token ends here
  };
  // The longest token starting at `pos`, as an index into tokens_, or -1.
  int32_t LongestAt(std::string_view text, size_t pos, size_t* end) const;

  std::vector<AddedToken> tokens_;
  std::vector<Node> trie_;
  std::array<bool, 256> first_byte_{};  // bytes that can start a token, to skip the rest fast
};

class AddedVocabulary {
 public:
  // `added_tokens` is tokenizer.json's "added_tokens" array (or null).
  static absl::StatusOr<AddedVocabulary> FromJson(const Json& added_tokens);

  const AddedTokenMatcher& raw_matcher() const { return raw_matcher_; }
  const AddedTokenMatcher& normalized_matcher() const { return normalized_matcher_; }
  const AddedToken* FindById(int32_t id) const;
  const AddedToken* FindByContent(std::string_view content) const;
  int32_t max_id() const { return max_id_; }  // -1 when there are none
  // At most how many bytes of input one added token stands for: its content, unless it strips the
  // whitespace beside it (then any amount: nullopt). 0 when there are none.
  std::optional<size_t> MaxBytesPerToken() const {
    size_t longest = 0;
    for (const AddedToken& t : tokens_) {
      if (t.lstrip || t.rstrip) return std::nullopt;
      longest = std::max(longest, t.content.size());
    }
    return longest;
  }

 private:
  std::vector<AddedToken> tokens_;
  absl::flat_hash_map<int32_t, size_t> by_id_;
  absl::flat_hash_map<std::string, size_t> by_content_;
  AddedTokenMatcher raw_matcher_;
  AddedTokenMatcher normalized_matcher_;
  int32_t max_id_ = -1;
};

}  // namespace llm::tokenizer_internal
