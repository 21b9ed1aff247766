#include "engine/tokenizer/split.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace llm::tokenizer_internal {

absl::StatusOr<SplitBehavior> ParseSplitBehavior(std::string_view name) {
  if (name == "Removed") return SplitBehavior::kRemoved;
  if (name == "Isolated") return SplitBehavior::kIsolated;
  if (name == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (name == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (name == "Contiguous") return SplitBehavior::kContiguous;
  return absl::InvalidArgumentError(absl::StrCat("unknown split behavior \"", std::string(name), "\""));
}

namespace {

// The fold the reference applies for MergedWithPrevious: a delimiter that follows a
// non-delimiter joins it; everything else starts a new piece.
std::vector<Segment> MergeWithPrevious(const std::vector<Segment>& segments) {
  std::vector<Segment> out;
  bool previous_match = false;
  for (const Segment& s : segments) {
    if (s.is_match && !previous_match && !out.empty()) {
      out.back().end = s.end;
    } else {
      out.push_back({s.begin, s.end, false});
    }
    previous_match = s.is_match;
  }
  return out;
}

// The mirror image, folded from the right.
std::vector<Segment> MergeWithNext(const std::vector<Segment>& segments) {
  std::vector<Segment> out;
  bool previous_match = false;
  for (auto it = segments.rbegin(); it != segments.rend(); ++it) {
    if (it->is_match && !previous_match && !out.empty()) {
      out.back().begin = it->begin;
    } else {
      out.push_back({it->begin, it->end, false});
    }
    previous_match = it->is_match;
  }
  std::reverse(out.begin(), out.end());
  return out;
}

// Neighbors of the same kind fuse: runs of delimiters, runs of the rest.
std::vector<Segment> MergeContiguous(const std::vector<Segment>& segments) {
  std::vector<Segment> out;
  bool previous_match = false;
  for (const Segment& s : segments) {
    if (s.is_match == previous_match && !out.empty()) {
      out.back().end = s.end;
    } else {
      out.push_back({s.begin, s.end, false});
    }
    previous_match = s.is_match;
  }
  return out;
}

}  // namespace

void SplitPiece(const PreToken& piece, std::vector<Segment> segments, SplitBehavior behavior,
                PreTokens* out) {
  switch (behavior) {
    case SplitBehavior::kRemoved:
      std::erase_if(segments, [](const Segment& s) { return s.is_match; });
      break;
    case SplitBehavior::kIsolated:
      break;
    case SplitBehavior::kMergedWithPrevious:
      segments = MergeWithPrevious(segments);
      break;
    case SplitBehavior::kMergedWithNext:
      segments = MergeWithNext(segments);
      break;
    case SplitBehavior::kContiguous:
      segments = MergeContiguous(segments);
      break;
  }
  for (const Segment& s : segments) {
    if (s.begin == s.end) continue;
    out->push_back({piece.text.substr(s.begin, s.end - s.begin), piece.at_origin && s.begin == 0});
  }
}

}  // namespace llm::tokenizer_internal
