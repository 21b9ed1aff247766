// RequestRecord: what one Generate call measured. Times are nanoseconds on the steady clock since
// the run's origin; -1 when the event did not happen.
#pragma once

#include <grpcpp/support/status_code_enum.h>

#include <cstdint>
#include <vector>

#include "llm/v1/llm.pb.h"

namespace llm::loadtest {

struct RequestRecord {
  int64_t index = 0;            // issue order within the run (warm-up requests first)
  bool warmup = false;          // excluded from the statistics
  int64_t prompt_len = 0;       // tokens asked for (estimated for text prompts without a tokenizer)
  int64_t expected_output = 0;  // max_tokens
  int32_t turn = 0;             // 1-based turn of a multi-turn conversation; 0 otherwise

  int64_t scheduled_ns = 0;     // when the arrival process wanted it sent
  int64_t send_ns = 0;          // when the call was started
  int64_t first_token_ns = -1;  // arrival of the first message carrying a token
  int64_t last_token_ns = -1;   // arrival of the message carrying the last token
  int64_t end_ns = -1;          // the call's status arrived

  int64_t output_tokens = 0;  // tokens streamed to the client
  // Every inter-token gap in milliseconds, output_tokens - 1 of them: the time between a token's
  // message and the previous token's. Tokens that arrive in the same message (the server merges
  // tokens when the client reads slower than the engine generates) have a gap of 0.
  std::vector<float> itl_ms;

  grpc::StatusCode status = grpc::StatusCode::OK;
  v1::FinishReason finish_reason = v1::FINISH_REASON_UNSPECIFIED;
  v1::Usage usage;         // from the last message
  v1::Timings timings;     // server-side, from the last message
  bool got_final = false;  // the last message (finish_reason, usage, timings) arrived

  bool ok() const { return status == grpc::StatusCode::OK; }
  double ttft_ms() const { return (first_token_ns - send_ns) / 1e6; }
  double e2e_ms() const { return (end_ns - send_ns) / 1e6; }
  // Time per output token after the first; needs 2 tokens or more.
  double tpot_ms() const {
    return output_tokens > 1 ? (last_token_ns - first_token_ns) / 1e6 / static_cast<double>(output_tokens - 1)
                             : 0;
  }
};

}  // namespace llm::loadtest
