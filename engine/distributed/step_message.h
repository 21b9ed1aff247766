// StepMessage: what the scheduling rank broadcasts to every rank each step: the StepPlan and,
// for the sampling stage, the sample rows (parameters, RNG step, the tokens penalties look at, the
// logit biases).
// A flat little-endian byte string; an empty message tells the workers to stop.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/backend/backend.h"
#include "engine/model/step_plan.h"

namespace llm {

// A decoded message owns what its rows point to.
struct StepMessage {
  StepPlan plan;
  std::vector<SamplingParams> params;
  std::vector<uint64_t> steps;
  std::vector<std::vector<int32_t>> prompt_tokens;
  std::vector<std::vector<int32_t>> output_tokens;
  std::vector<int32_t> pending_input_index;
  std::vector<std::vector<LogitBias>> logit_bias;
  std::vector<SampleRow> rows;  // built by Decode, pointing into the vectors above
};

void EncodeStepMessage(const StepPlan& plan, absl::Span<const SampleRow> rows, std::string& out);
absl::Status DecodeStepMessage(const std::string& bytes, StepMessage& message);

// The sampled tokens the last stage returns to the scheduling rank: per row the token, its
// logprob and only the top logprobs that were asked for (12 bytes a row without them, so a
// micro-batch's results fit MPI's eager limit instead of waiting for the receiver to match).
void EncodeSampleResults(absl::Span<const SampleResult> results, std::string& out);
// DataLoss when `bytes` is malformed or holds another number of rows than `results`.
absl::Status DecodeSampleResults(std::string_view bytes, absl::Span<SampleResult> results);

}  // namespace llm
