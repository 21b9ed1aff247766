// OpenAiCall: one POST /v1/completions or /v1/chat/completions, from its parsed request to its
// last byte. It submits one engine request per choice (prompts x n) through ServingState, the
// same path as gRPC calls (policy, metrics, drain), and turns the engine's updates, on the output
// threads, into server-sent events or one JSON response. Nothing waits: each update is formatted
// and queued on the connection. When the client disconnects, every choice is cancelled in the
// engine, which frees their KV cache blocks within a step.
#pragma once

#include <memory>

#include "server/grpc/serving_state.h"
#include "server/http/http_server.h"
#include "server/http/openai_request.h"

namespace llm::server {

// Starts the call; errors before generation (bad input, queue full, draining) are answered at
// once with OpenAI's error body.
void StartOpenAiCall(ServingState& state, OpenAiRequest request, std::shared_ptr<HttpResponder> responder);

}  // namespace llm::server
