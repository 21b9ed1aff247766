// Reading tokenizer.json quickly. A DOM of the whole file spends most of the load time building
// the 100k-entry vocab object and the 100k+ merges array; a SAX pass collects those two straight
// into flat vectors and builds a DOM of the (small) rest.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/tokenizer/json_util.h"

namespace llm::tokenizer_internal {

// Merges as pairs of tokens, in rank order, packed into one buffer: a vector of string pairs
// costs two allocations per merge, and files have hundreds of thousands.
class MergeList {
 public:
  void Add(std::string_view left, std::string_view right) {
    chars_.append(left);
    ends_.push_back(static_cast<uint32_t>(chars_.size()));
    chars_.append(right);
    ends_.push_back(static_cast<uint32_t>(chars_.size()));
  }
  size_t size() const { return ends_.size() / 2; }
  std::pair<std::string_view, std::string_view> operator[](size_t i) const {
    const uint32_t begin = i == 0 ? 0 : ends_[2 * i - 1];
    const std::string_view all(chars_);
    return {all.substr(begin, ends_[2 * i] - begin), all.substr(ends_[2 * i], ends_[2 * i + 1] - ends_[2 * i])};
  }

 private:
  std::string chars_;
  std::vector<uint32_t> ends_;  // end of the left, then of the right token, of each merge
};

// model.vocab and model.merges, in file order.
struct BpeTables {
  std::vector<std::pair<std::string, int64_t>> vocab;
  // Legacy "a b" lines are already split and "#version" lines dropped.
  MergeList merges;
};

struct TokenizerJson {
  Json root;
  // Set when the fast path took model.vocab and model.merges out of `root` (they are null there).
  // Unset when they were left in `root`: absent, or shaped unusually (the DOM code then reports
  // the precise problem).
  std::optional<BpeTables> bpe;
};

// InvalidArgument when `text` is not JSON.
absl::StatusOr<TokenizerJson> ParseTokenizerJson(std::string_view text);

// The same tables from a DOM "model" object, validating them.
absl::StatusOr<BpeTables> BpeTablesFromJson(const Json& model);

}  // namespace llm::tokenizer_internal
