// The JSON the OpenAI SDKs read back: completion and chat-completion objects, their streamed
// chunks (`data: <chunk>\n\n` server-sent events, ending with `data: [DONE]`), usage and
// log-probabilities. Shapes follow OpenAI's API reference (and vLLM where OpenAI has none):
//   completions:  {"id": "cmpl-..", "object": "text_completion", "created", "model",
//                  "choices": [{"index", "text", "logprobs": null | {"tokens", "token_logprobs",
//                  "top_logprobs", "text_offset"}, "finish_reason"}], "usage"}
//   chat:         {"id": "chatcmpl-..", "object": "chat.completion", "created", "model",
//                  "choices": [{"index", "message": {"role": "assistant", "content"},
//                  "logprobs": null | {"content": [{"token", "logprob", "bytes", "top_logprobs"}]},
//                  "finish_reason"}], "usage"}
//   chat chunks:  "object": "chat.completion.chunk", choices[].delta ({"role": "assistant",
//                  "content": ""} first, then {"content": ...}, {} with the finish_reason)
//   usage:        {"prompt_tokens", "completion_tokens", "total_tokens"}; streamed only with
//                  stream_options.include_usage, in a last chunk with "choices": [] (the other
//                  chunks then carry "usage": null)
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/request.h"
#include "engine/tokenizer/tokenizer.h"
#include "nlohmann/json.hpp"

namespace llm::server {

using OrderedJson = nlohmann::ordered_json;

struct ResponseShape {
  bool chat = false;
  std::string id;       // "cmpl-<hex>" or "chatcmpl-<hex>"
  int64_t created = 0;  // Unix seconds
  std::string model;
  const Tokenizer* tokenizer = nullptr;  // for token strings; null: "token_id:<id>"
  bool logprobs = false;
  int top_logprobs = 0;
  bool include_usage = false;  // streamed chunks carry "usage": null
};

// A fresh response id for `chat` or completion responses.
std::string NewResponseId(bool chat);

// "stop" (a stop string or token, or EOS), "length"; other reasons (cancelled, error) never reach
// a client as a finish_reason.
const char* OpenAiFinishReason(FinishReason reason);

// One choice's log-probabilities, built as its tokens arrive.
class ChoiceLogprobs {
 public:
  explicit ChoiceLogprobs(const ResponseShape& shape) : shape_(shape) {}
  // Appends `samples`; returns the part for just these (a chunk's "logprobs").
  OrderedJson Append(const std::vector<SampleResult>& samples);
  // Everything so far (a whole response's "logprobs").
  const OrderedJson& all() const { return all_; }

 private:
  std::string TokenText(int32_t id) const;
  OrderedJson Part(const std::vector<SampleResult>& samples);

  const ResponseShape& shape_;
  OrderedJson all_;
  int64_t text_offset_ = 0;
};

// A response's token counts; cached_prompt_tokens (prompt tokens read from the prefix cache) is
// OpenAI's usage.prompt_tokens_details.cached_tokens.
struct Usage {
  int64_t prompt_tokens = 0;
  int64_t cached_prompt_tokens = 0;
  int64_t completion_tokens = 0;
};
OrderedJson UsageJson(const Usage& usage);

// A streamed chunk's JSON for choice `index`: `text` (chat: a delta; `role` adds the assistant
// role), its log-probabilities (null when not asked), the finish reason (nullptr while running).
OrderedJson ChunkJson(const ResponseShape& shape, int index, const std::string& text, bool role,
                      OrderedJson logprobs, const char* finish_reason);
// The last chunk of a stream asked for with include_usage.
OrderedJson UsageChunkJson(const ResponseShape& shape, const Usage& usage);

struct FinishedChoice {
  std::string text;
  OrderedJson logprobs;  // null when not asked
  const char* finish_reason = "stop";
};
// A whole (not streamed) response.
OrderedJson ResponseJson(const ResponseShape& shape, const std::vector<FinishedChoice>& choices,
                         const Usage& usage);

// `json` as one server-sent event: "data: <json>\n\n".
std::string SseEvent(const OrderedJson& json);
inline constexpr char kSseDone[] = "data: [DONE]\n\n";

}  // namespace llm::server
