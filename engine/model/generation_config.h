// The sampling defaults a checkpoint publishes in generation_config.json (temperature, top_p,
// top_k, min_p, repetition_penalty): what its authors tuned it for, applied by the server to the
// fields a request leaves unset, as vLLM and transformers do. Other keys (eos_token_id: see
// config.h; max_length, do_sample, ...) are not sampling defaults and are left alone.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

#include "absl/status/statusor.h"

namespace llm {

struct GenerationDefaults {
  std::optional<float> temperature;
  std::optional<float> top_p;
  std::optional<int32_t> top_k;  // 0 (or HF's "off" values) means no limit
  std::optional<float> min_p;
  std::optional<float> repetition_penalty;

  bool empty() const { return !temperature && !top_p && !top_k && !min_p && !repetition_penalty; }
  // "temperature=0.6 top_p=0.9", or "none".
  std::string ToString() const;
};

// Reads `model_dir`/generation_config.json: empty defaults when the file is absent;
// InvalidArgument naming the file and key when it is malformed or a value is of the wrong type.
absl::StatusOr<GenerationDefaults> ReadGenerationDefaults(const std::filesystem::path& model_dir);

}  // namespace llm
