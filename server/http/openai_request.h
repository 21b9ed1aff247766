// The request bodies of POST /v1/completions and /v1/chat/completions, as the OpenAI SDKs send
// them, mapped onto the server's own request (v1::GenerateRequest, which both front ends hand to
// ServingState) and, for chat, the conversation (ChatRequest).
//
// Every field is either honoured or refused: a field this server does not implement is a 400
// naming it, unless it holds the value that means "not used" (null, false, [] or {}; e.g.
// "tools": [], "response_format": {"type": "text"}), because clients such as
// LangChain send those on every call. Fields (see README "OpenAI-compatible HTTP API"):
//   both:        model, max_tokens, temperature, top_p, n, stream, stream_options.include_usage,
//                stop, seed, presence_penalty, frequency_penalty, logit_bias, user, and vLLM's top_k, min_p,
//                repetition_penalty, ignore_eos, min_tokens, stop_token_ids, skip_special_tokens
//                (true only: the engine always skips them), priority
//   completions: prompt (string, token ids, or a list of either: one choice set per prompt),
//                logprobs (0..20), add_special_tokens, echo (false), best_of (<= n), suffix (null)
//   chat:        messages, max_completion_tokens, logprobs (bool), top_logprobs (0..20),
//                chat_template_kwargs, add_generation_prompt
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/chat/chat_template.h"
#include "llm/v1/llm.pb.h"

namespace llm::server {

inline constexpr int kMaxChoices = 16;  // n x prompts per request

struct OpenAiRequest {
  bool chat = false;
  std::string model;  // as asked; empty when the client sent none
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  int n = 1;
  // Completions: one request per prompt, each with its prompt set; chat: one, without a prompt
  // (the conversation is rendered later). Each carries the sampling and stopping fields.
  std::vector<v1::GenerateRequest> prompts;
  bool max_tokens_set = false;  // chat without it generates up to the context length
  ChatRequest conversation;     // chat only
  // Log-probabilities to report: none, the sampled token's (logprobs), and top_logprobs
  // alternatives per token.
  bool logprobs = false;
  int top_logprobs = 0;
};

// InvalidArgument naming the field when the body is not what the endpoint accepts.
absl::StatusOr<OpenAiRequest> ParseCompletionRequest(std::string_view body);
absl::StatusOr<OpenAiRequest> ParseChatCompletionRequest(std::string_view body);

}  // namespace llm::server
