// Splitting a piece of text around delimiter matches, with the five delimiter behaviors of the
// reference library. Split, Metaspace, Digits and ByteLevel pre-tokenizers all reduce to this.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace llm::tokenizer_internal {

// One pre-token: a piece of normalized text that the model tokenizes on its own.
struct PreToken {
  std::string text;
  // Starts at byte 0 of the encoded input, i.e. no added token and no split precedes it.
  // Metaspace's prepend_scheme "first" prepends only to such a piece.
  bool at_origin = false;
};
using PreTokens = std::vector<PreToken>;

enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

absl::StatusOr<SplitBehavior> ParseSplitBehavior(std::string_view name);

// A run of text that the pattern matched (a delimiter) or that lies between matches.
struct Segment {
  size_t begin;
  size_t end;
  bool is_match;
};

// Covers [0, size) with `matches` (sorted, non-overlapping [begin, end) ranges) and the gaps
// between them; `invert` swaps which of the two is the delimiter.
template <typename Matches>
std::vector<Segment> SegmentsFromMatches(size_t size, const Matches& matches, bool invert) {
  std::vector<Segment> segments;
  segments.reserve(matches.size() * 2 + 1);
  size_t previous = 0;
  for (const auto& [begin, end] : matches) {
    if (previous != begin) segments.push_back({previous, begin, invert});
    segments.push_back({begin, end, !invert});
    previous = end;
  }
  if (previous != size || size == 0) segments.push_back({previous, size, invert});
  return segments;
}

// Every code point for which `is_delimiter` holds is a one-character match.
template <typename Predicate>
std::vector<Segment> SegmentsFromCodePoints(std::string_view text, Predicate is_delimiter, bool invert);

// Appends the non-empty pieces that `behavior` makes of `piece` to `out`.
void SplitPiece(const PreToken& piece, std::vector<Segment> segments, SplitBehavior behavior, PreTokens* out);

}  // namespace llm::tokenizer_internal

#include "engine/tokenizer/utf8.h"

namespace llm::tokenizer_internal {

template <typename Predicate>
std::vector<Segment> SegmentsFromCodePoints(std::string_view text, Predicate is_delimiter, bool invert) {
  std::vector<std::pair<size_t, size_t>> matches;
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t begin = pos;
    const char32_t c = DecodeCodePoint(text, &pos);
    if (is_delimiter(c)) matches.emplace_back(begin, pos);
  }
  return SegmentsFromMatches(text.size(), matches, invert);
}

}  // namespace llm::tokenizer_internal
