// The OpenAI-compatible HTTP API as a load-test target (`llm loadtest --backend openai|openai-chat
// --target http://HOST:PORT`): each request is one POST /v1/completions (or /v1/chat/completions)
// with "stream": true and stream_options.include_usage, read as server-sent events on an
// asynchronous client (Boost.Beast), so that thousands of streams run from a few threads, as the
// gRPC target does. A chunk that carries text is a token arrival (the server sends one per engine
// update); the final usage gives the exact token count. It speaks to any OpenAI-compatible server
// (vLLM, SGLang, TGI): prompts are token ids for /v1/completions, text for chat (a word per
// token of the synthetic length), and `ignore_eos` is sent as vLLM's extension.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "server/loadtest/target.h"

namespace llm::loadtest {

struct OpenAiTargetOptions {
  std::string url;        // http://HOST:PORT
  bool chat = false;      // /v1/chat/completions instead of /v1/completions
  std::string api_key;    // sent as "Authorization: Bearer <key>"
  int io_threads = 4;     // the client's I/O threads (--connections)
  absl::Duration timeout = absl::Seconds(30);  // for the server to answer GET /v1/models
};

// Reads GET /v1/models (the served model's id, max_model_len, and vocab_size where the server
// reports it: else ids below 1000, which every real vocabulary has) until it answers or the
// timeout passes.
absl::StatusOr<std::unique_ptr<Target>> ConnectOpenAi(const OpenAiTargetOptions& options);

}  // namespace llm::loadtest
