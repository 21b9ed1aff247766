// Token sampling on the GPU, one block per row of float32 logits (a cluster of blocks a row while
// the rows are few), following the CPU sampler
// (engine/backend/cpu/cpu_sampler.cc): penalties -> (greedy argmax | temperature -> top-k ->
// top-p -> min-p -> draw with uniform(seed, step)), plus log-probabilities of the raw logits.
//
// Selection is exact and deterministic: thresholds are found by radix select over the float
// keys, probability masses are summed in 64-bit fixed point (2^-40 units), so no result depends
// on thread scheduling. Ties order by token id, as the CPU's comparator does. The draw walks the
// candidates in sorted order when top-p is active (as the CPU does) and in token-id order
// otherwise (the CPU walks top-k candidates in std::nth_element's unspecified order there).
#pragma once

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "kernels/cuda/common/stream.h"

namespace llm::cuda {

inline constexpr int kSamplerMaxTop = 20;
// The largest vocabulary a row may have (2^21: the radix histograms' 32-bit pieces, sampler.cu).
inline constexpr int64_t kSamplerMaxVocab = int64_t{1} << 21;

struct SamplerRowParams {
  float temperature = 1.0f;  // <= 0: greedy
  int32_t top_k = 0;
  float top_p = 1.0f;
  float min_p = 0.0f;
  float repetition_penalty = 1.0f;
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  int32_t num_top_logprobs = 0;
  uint64_t seed = 0;
  uint64_t step = 0;
  int32_t entry_begin = 0;  // this row's token entries: [entry_begin, entry_end)
  int32_t entry_end = 0;
  // >= 0: one more output token, not among the entries: input_tokens[pending_input_index] (the
  // previous step's sample, resolved on the device). Penalties count it when they are on.
  int32_t pending_input_index = -1;
};

// One distinct token of a row whose logit changes before sampling: its logit bias is added first;
// then, when it is in the prompt or output (`seen`), the repetition penalty applies to it, and the
// presence/frequency penalties when output_count > 0.
struct SamplerTokenEntry {
  int32_t token = 0;
  int32_t output_count = 0;
  float bias = 0.0f;
  int32_t seen = 0;
};

struct SamplerRowResult {
  int32_t token = -1;
  float logprob = 0.0f;
  int32_t num_top = 0;
  int32_t top_token[kSamplerMaxTop];
  float top_logprob[kSamplerMaxTop];
};

// logits f32 [rows, vocab]; work f32 [rows, vocab] (biased and penalized copies; rows without
// token entries or penalties do not touch it); results [rows]; input_tokens: the step's input ids (read for rows with a
// pending_input_index; may be null otherwise); tokens_out [rows] (may be null): each row's token
// again, densely, for the next step's input.
// max_blocks_per_row: at most this many blocks (a thread block cluster) share a row; by default up
// to 8 while the rows are few (1 block a row reproduces the one-SM form, e.g. to measure it).
absl::Status LaunchSampler(const float* logits, int64_t rows, int64_t vocab, const SamplerRowParams* params,
                           const SamplerTokenEntry* entries, const int32_t* input_tokens, float* work,
                           SamplerRowResult* results, int32_t* tokens_out, Stream stream,
                           int max_blocks_per_row = 8);

}  // namespace llm::cuda
