// Reads a fixture's expected.safetensors (made by Hugging Face transformers, float32 on the CPU):
// prompts, teacher-forced logits at every prompt position, 24 greedy tokens and their logits.
#pragma once

#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/model/checkpoint.h"
#include "gtest/gtest.h"

namespace llm::testing {

struct FixturePrompt {
  std::vector<int32_t> prompt;
  std::vector<float> prefill_logits;  // [L, vocab]
  std::vector<int32_t> greedy;        // [24]
  std::vector<float> greedy_logits;   // [24, vocab]
};

inline std::string ModelDir(const std::string& name) { return std::string(LLM_TEST_DATA_DIR) + "/models/" + name; }

inline std::vector<FixturePrompt> LoadFixturePrompts(const std::string& model) {
  auto ckpt = Checkpoint::OpenFile(ModelDir(model) + "/expected.safetensors");
  EXPECT_TRUE(ckpt.ok()) << ckpt.status();
  std::vector<FixturePrompt> out;
  for (int i = 0;; ++i) {
    const std::string suffix = absl::StrCat("_", i);
    if (!(*ckpt)->Contains("prompt" + suffix)) break;
    FixturePrompt p;
    auto ints = [&](const std::string& name) {
      const TensorRecord* r = *(*ckpt)->Find(name);
      const int32_t* d = static_cast<const int32_t*>(r->data);
      return std::vector<int32_t>(d, d + r->numel());
    };
    auto floats = [&](const std::string& name) {
      const TensorRecord* r = *(*ckpt)->Find(name);
      const float* d = static_cast<const float*>(r->data);
      return std::vector<float>(d, d + r->numel());
    };
    p.prompt = ints("prompt" + suffix);
    p.greedy = ints("greedy" + suffix);
    p.prefill_logits = floats("prefill_logits" + suffix);
    p.greedy_logits = floats("greedy_logits" + suffix);
    out.push_back(std::move(p));
  }
  return out;
}

// ‖a − b‖ / ‖b‖ over one row.
inline double RelativeError(const float* a, const float* b, int64_t n) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < n; ++i) {
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(b[i]) * b[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

inline const char* kFixtureModels[] = {"llama-tiny", "llama3-tiny-bf16", "qwen2-tiny", "qwen3-tiny-fp16",
                                       "llama-tiny-sharded"};
// The FP8 checkpoints, one per published layout (tests/data/FIXTURES.md): their references are
// float32 over the dequantized weights.
inline const char* kFp8FixtureModels[] = {"llama-fp8-block", "qwen3-fp8-channel", "llama-fp8-tensor-kv"};
// The 4-bit (W4A16) checkpoints, one per published packing and variant (tests/data/FIXTURES.md):
// references float64 over the weights as the producers' readers dequantize them.
inline const char* kInt4FixtureModels[] = {"llama-w4-awq", "qwen2-w4-gptq-actorder", "llama-w4-gptq-sym",
                                           "llama-w4-ct", "llama-w4-ct-asym-actorder"};

}  // namespace llm::testing
