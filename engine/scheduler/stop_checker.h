// A request's stop criteria, in two halves that run on different threads:
//  - TokenStopReason (the engine thread, as each token arrives): EOS, stop token ids, max_tokens;
//  - StopStringMatcher (the output thread, on the detokenized text): stop strings, and which text
//    is safe to stream. Text that could still turn into a stop string is held back until it
//    cannot, so the streamed text always equals the final text.
// None is honoured before min_tokens. When both halves stop at the same token, the stop string
// wins (it is checked before the length limit, as a single checker would).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/types/span.h"
#include "engine/request.h"

namespace llm {

// After token `token` (the `completion_tokens`-th generated one): kEos, kStop (a stop token id),
// kLength, or kNone to continue.
FinishReason TokenStopReason(const StopCriteria& criteria, absl::Span<const int32_t> eos_token_ids, int32_t token,
                             int32_t completion_tokens);

class StopStringMatcher {
 public:
  explicit StopStringMatcher(const StopCriteria& criteria);

  // Appends the text of the `completion_tokens`-th token; true when a stop string now matches
  // (the text from its start on is never sent).
  bool Append(std::string_view text_delta, int32_t completion_tokens);
  bool matched() const { return stop_cut_ != std::string::npos; }

  // Text that may be sent now (moves it out of the held-back buffer). At finish, call with
  // finished = true to release the remainder (cut at a matched stop string).
  std::string TakeText(bool finished);

 private:
  const StopCriteria& criteria_;
  std::string text_;                     // produced but not yet sent
  size_t stop_cut_ = std::string::npos;  // where a matched stop string starts in text_
  size_t max_stop_len_ = 0;
};

}  // namespace llm
