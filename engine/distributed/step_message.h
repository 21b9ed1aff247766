// StepMessage: what the scheduling rank broadcasts to every rank each step: the StepPlan and,
// for the sampling stage, the sample rows (parameters, RNG step, the tokens penalties look at).
// A flat little-endian byte string; an empty message tells the workers to stop.
#pragma once

#include <string>
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
  std::vector<SampleRow> rows;  // built by Decode, pointing into the vectors above
};

void EncodeStepMessage(const StepPlan& plan, absl::Span<const SampleRow> rows, std::string& out);
absl::Status DecodeStepMessage(const std::string& bytes, StepMessage& message);

}  // namespace llm
