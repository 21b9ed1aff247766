// What a client asks the engine for, and what the engine sends back. Plain data: the server maps
// its protobuf messages onto these and back, in one place.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "engine/core/sampling.h"

namespace llm {

using RequestId = uint64_t;

enum class FinishReason { kNone, kLength, kStop, kEos, kCancelled, kDeadline, kError };
std::string_view FinishReasonName(FinishReason reason);  // "length", "stop", ...

struct StopCriteria {
  int32_t max_tokens = 16;
  int32_t min_tokens = 0;  // EOS and stop tokens/strings are not honoured before this many tokens
  bool ignore_eos = false;
  std::vector<int32_t> stop_token_ids;
  std::vector<std::string> stop_strings;  // matched on the detokenized output; excluded from it
};

struct GenerateRequest {
  std::string client_request_id;  // echoed back; for logs
  std::vector<int32_t> prompt_tokens;
  SamplingParams sampling;        // sampling.seed is used only when has_seed
  std::vector<LogitBias> logit_bias;  // distinct tokens, any order
  bool has_seed = false;
  StopCriteria stop;
  int32_t priority = 0;           // higher runs first; FCFS within a priority
  absl::Time deadline = absl::InfiniteFuture();
  bool detokenize = true;         // fill RequestOutput::text (needs a tokenizer)
  // Requests share cached prompt blocks only with requests of the same salt (tenants cannot
  // probe each other's prompts through timing); empty: the default.
  std::string cache_salt;
};

struct RequestTimings {
  double queue_ms = 0;  // arrival -> first scheduled
  double ttft_ms = 0;   // arrival -> first token
  double decode_ms = 0; // first token -> finish
  double total_ms = 0;  // arrival -> finish
};

// One update of a request: the tokens produced since the previous update. The last update has
// finished = true and carries the finish reason, usage and timings.
struct RequestOutput {
  RequestId id = 0;
  std::vector<int32_t> token_ids;
  std::string text;                    // UTF-8 text of token_ids (never a broken sequence)
  std::vector<SampleResult> logprobs;  // one per token when top logprobs were asked for
  bool finished = false;
  FinishReason finish_reason = FinishReason::kNone;
  absl::Status status;                 // the error when finish_reason == kError
  int32_t prompt_tokens = 0;
  int32_t cached_prompt_tokens = 0;  // of prompt_tokens, read from the prefix cache (final update)
  int32_t completion_tokens = 0;
  int32_t preemptions = 0;
  RequestTimings timings;
};

// Called on the engine's thread; must not block (queue the output and return).
using OutputCallback = std::function<void(RequestOutput)>;

}  // namespace llm
