#include "tests/tokenizer/tokenizer_test_util.h"

#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace llm::testing {

std::string ReadTestFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    ADD_FAILURE() << "cannot open " << path;
    std::abort();
  }
  std::ostringstream contents;
  contents << in.rdbuf();
  return contents.str();
}

std::string TokenizerJsonPath(const std::string& name) {
  return std::string(LLM_TOKENIZER_DATA_DIR) + "/" + name + "-tokenizer.json";
}

std::string TokenizerConfigPath(const std::string& name) {
  return std::string(LLM_TEST_DATA_DIR) + "/tokenizers/" + name + "-tokenizer_config.json";
}

const Tokenizer& ReferenceTokenizer(const std::string& name) {
  static std::mutex mutex;
  static auto* const loaded = new std::map<std::string, std::unique_ptr<Tokenizer>>();
  std::lock_guard<std::mutex> lock(mutex);
  auto& slot = (*loaded)[name];
  if (slot == nullptr) {
    auto tokenizer = Tokenizer::FromJson(ReadTestFile(TokenizerJsonPath(name)),
                                         ReadTestFile(TokenizerConfigPath(name)));
    if (!tokenizer.ok()) {
      ADD_FAILURE() << name << ": " << tokenizer.status();
      std::abort();
    }
    slot = *std::move(tokenizer);
  }
  return *slot;
}

const std::vector<ReferenceCase>& ReferenceCases(const std::string& name) {
  static std::mutex mutex;
  static auto* const loaded = new std::map<std::string, std::vector<ReferenceCase>>();
  std::lock_guard<std::mutex> lock(mutex);
  auto [it, inserted] = loaded->try_emplace(name);
  if (inserted) {
    const auto json = nlohmann::json::parse(
        ReadTestFile(std::string(LLM_TEST_DATA_DIR) + "/tokenizers/" + name + "-cases.json"));
    for (const auto& c : json.at("cases")) {
      it->second.push_back({c.at("text").get<std::string>(), c.at("ids").get<std::vector<int32_t>>(),
                            c.at("ids_with_special").get<std::vector<int32_t>>(),
                            c.at("decoded").get<std::string>()});
    }
  }
  return it->second;
}

}  // namespace llm::testing
