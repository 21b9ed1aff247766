// Mapping between the API's protobuf messages (proto/llm/v1/llm.proto) and the engine's plain
// request/output structs (engine/request.h), both ways, in one place. Defaults the proto leaves
// unset are filled here; range checks are the engine's (Engine::Validate), except what only the
// server can see (text encoding, the text prompt's tokenization).
#pragma once

#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "engine/chat/chat_template.h"
#include "engine/engine.h"
#include "engine/model/generation_config.h"
#include "engine/request.h"
#include "engine/tokenizer/tokenizer.h"
#include "llm/v1/llm.pb.h"

namespace llm::server {

inline constexpr int32_t kDefaultMaxTokens = 16;
inline constexpr size_t kMaxRequestIdBytes = 256;

// InvalidArgument when `bytes` is not valid UTF-8, naming `what` and the byte offset.
absl::Status CheckUtf8(std::string_view bytes, std::string_view what);

// What the operator decided for every request, whichever API it came through.
struct RequestPolicy {
  GenerationDefaults defaults;  // for sampling fields the request leaves unset
  int32_t max_priority = 0;     // the highest priority a client may ask for
};

// The engine request for `request`. `tokenizer` (may be null) encodes a text prompt and makes the
// output carry text. `deadline` is the call's deadline (absl::InfiniteFuture() for none).
absl::StatusOr<GenerateRequest> ToEngineRequest(const v1::GenerateRequest& request, const Tokenizer* tokenizer,
                                                absl::Time deadline, const RequestPolicy& policy = {});

// A Chat request's conversation in the shapes ChatTemplate takes (JSON fields parsed; text checked
// to be UTF-8). InvalidArgument naming the field on bad input, or when options has a prompt.
absl::StatusOr<ChatRequest> ToChatRequest(const v1::ChatRequest& request);

// Appends one engine update to `response`: its tokens, text and logprobs, and, when it is the last
// one, the finish reason, usage and timings. Appending every update of a request to one message
// gives exactly the unary (Complete) response.
void AppendOutput(const RequestOutput& output, v1::GenerateResponse* response);

v1::FinishReason ToProtoFinishReason(FinishReason reason);

// What ModelInfo reports beyond the engine's own EngineInfo.
struct Deployment {
  std::string model_name;  // --served-model-name, else the model folder's name
  std::string device;      // cpu | cuda
  int32_t tensor_parallel = 1;
  int32_t pipeline_parallel = 1;
  int32_t max_queue = 0;
  int64_t max_message_bytes = 0;
};

v1::ModelInfoResponse ToModelInfo(const EngineInfo& engine, const Tokenizer* tokenizer,
                                  const Deployment& deployment);

// The status a finished request's call ends with: OK for length/stop/eos, Cancelled,
// DeadlineExceeded, or the engine's error.
absl::Status FinishStatus(const RequestOutput& last);

}  // namespace llm::server
