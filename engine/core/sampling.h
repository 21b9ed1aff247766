// What a request asks of sampling, and what sampling returns for one token: plain data shared by
// the request types (engine/request.h) and the backends' samplers (engine/backend/backend.h).
#pragma once

#include <array>
#include <cstdint>

namespace llm {

inline constexpr int kMaxTopLogprobs = 20;
// logit_bias (OpenAI's): at most this many tokens a request, each bias within +-kMaxLogitBias.
// The bound keeps the per-step host work of packing a batch's entries small (512 rows x 1024).
inline constexpr int kMaxLogitBiasTokens = 1024;
inline constexpr float kMaxLogitBias = 100.0f;

struct SamplingParams {
  float temperature = 1.0f;  // 0: greedy
  int32_t top_k = 0;         // 0: off
  float top_p = 1.0f;        // (0, 1]
  float min_p = 0.0f;        // [0, 1]
  float repetition_penalty = 1.0f;  // > 0; over prompt and output tokens
  float presence_penalty = 0.0f;    // over output tokens
  float frequency_penalty = 0.0f;   // over output tokens
  uint64_t seed = 0;
  int32_t num_top_logprobs = 0;  // 0..kMaxTopLogprobs
};

// An additive bias on one token's logit, applied before the penalties, temperature and
// truncation (greedy decoding takes the argmax of the biased logits). Log-probabilities stay those
// of the raw logits.
struct LogitBias {
  int32_t token = 0;
  float bias = 0.0f;
};

struct TokenLogprob {
  int32_t token = -1;
  float logprob = 0.0f;
};

// Log-probabilities are those of the model's raw distribution (before penalties/temperature).
struct SampleResult {
  int32_t token = -1;
  float logprob = 0.0f;
  int32_t num_top = 0;
  std::array<TokenLogprob, kMaxTopLogprobs> top{};
};

}  // namespace llm
