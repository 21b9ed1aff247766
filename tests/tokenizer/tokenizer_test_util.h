// Shared fixtures for the tokenizer tests: the three reference tokenizers, loaded once, and their
// reference cases (made by the `tokenizers` library; see tests/data/tokenizers).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/tokenizer/tokenizer.h"

namespace llm::testing {

struct ReferenceCase {
  std::string text;
  std::vector<int32_t> ids;
  std::vector<int32_t> ids_with_special;
  std::string decoded;
};

// "llama2", "llama3" or "qwen3". Aborts the test binary if the files are missing.
const Tokenizer& ReferenceTokenizer(const std::string& name);
const std::vector<ReferenceCase>& ReferenceCases(const std::string& name);
std::string ReadTestFile(const std::string& path);
std::string TokenizerJsonPath(const std::string& name);
std::string TokenizerConfigPath(const std::string& name);

}  // namespace llm::testing
