// StopChecker: applies a request's stop criteria to its growing output, and decides which text is
// safe to stream. Text that could still turn into a stop string is held back until it cannot, so
// the streamed text always equals the final text.
#pragma once

#include <string>
#include <string_view>

#include "engine/request.h"

namespace llm {

class StopChecker {
 public:
  StopChecker(const StopCriteria& criteria, std::vector<int32_t> eos_token_ids);

  // After token `token` (the `completion_tokens`-th) was sampled and its text `text_delta`
  // appended: the finish reason, or kNone to continue.
  FinishReason OnToken(int32_t token, int32_t completion_tokens, std::string_view text_delta);

  // Text that may be sent now (moves it out of the held-back buffer). At finish, call with
  // finished = true to release the remainder (cut at a matched stop string).
  std::string TakeText(bool finished);

 private:
  const StopCriteria& criteria_;
  std::vector<int32_t> eos_;
  std::string text_;        // produced but not yet sent
  size_t stop_cut_ = std::string::npos;  // where a matched stop string starts in text_
  size_t max_stop_len_ = 0;
};

}  // namespace llm
