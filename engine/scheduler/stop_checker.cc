#include "engine/scheduler/stop_checker.h"

#include <algorithm>

namespace llm {

FinishReason TokenStopReason(const StopCriteria& c, absl::Span<const int32_t> eos, int32_t token,
                             int32_t completion_tokens) {
  const bool may_stop = completion_tokens >= c.min_tokens;
  if (may_stop && !c.ignore_eos && std::find(eos.begin(), eos.end(), token) != eos.end()) return FinishReason::kEos;
  if (may_stop && std::find(c.stop_token_ids.begin(), c.stop_token_ids.end(), token) != c.stop_token_ids.end())
    return FinishReason::kStop;
  if (completion_tokens >= c.max_tokens) return FinishReason::kLength;
  return FinishReason::kNone;
}

StopStringMatcher::StopStringMatcher(const StopCriteria& criteria) : criteria_(criteria) {
  for (const std::string& s : criteria_.stop_strings) max_stop_len_ = std::max(max_stop_len_, s.size());
}

bool StopStringMatcher::Append(std::string_view text_delta, int32_t completion_tokens) {
  if (matched()) return true;
  const size_t old_size = text_.size();
  text_.append(text_delta);
  if (completion_tokens < criteria_.min_tokens || max_stop_len_ == 0 || text_delta.empty()) return false;
  // A match must end inside the new text; it may start up to max_stop_len_ - 1 bytes before it.
  const size_t from = old_size >= max_stop_len_ ? old_size - max_stop_len_ + 1 : 0;
  size_t best = std::string::npos;
  for (const std::string& s : criteria_.stop_strings) {
    if (s.empty()) continue;
    const size_t at = text_.find(s, from);
    if (at != std::string::npos) best = std::min(best, at);
  }
  stop_cut_ = best;
  return matched();
}

std::string StopStringMatcher::TakeText(bool finished) {
  size_t send = text_.size();
  if (stop_cut_ != std::string::npos) {
    send = stop_cut_;
  } else if (!finished && max_stop_len_ > 0) {
    // Hold back the longest suffix that is a proper prefix of some stop string.
    size_t hold = 0;
    for (const std::string& s : criteria_.stop_strings) {
      for (size_t len = std::min(s.size() - 1, text_.size()); len > hold; --len) {
        if (text_.compare(text_.size() - len, len, s, 0, len) == 0) {
          hold = len;
          break;
        }
      }
    }
    send = text_.size() - hold;
  }
  std::string out = text_.substr(0, send);
  text_.erase(0, finished ? text_.size() : send);
  if (stop_cut_ != std::string::npos) stop_cut_ = finished ? std::string::npos : stop_cut_ - send;
  return out;
}

}  // namespace llm
