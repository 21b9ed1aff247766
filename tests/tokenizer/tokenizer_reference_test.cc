// Every reference case of every tokenizer: Encode with and without special tokens, Decode, and the
// incremental detokenizer, all exactly as the `tokenizers` library does them.
#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "engine/tokenizer/tokenizer.h"
#include "tests/tokenizer/tokenizer_test_util.h"

namespace llm {
namespace {

using testing::ReferenceCases;
using testing::ReferenceTokenizer;

class ReferenceTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ReferenceTest, EncodeWithoutSpecialTokens) {
  const Tokenizer& tokenizer = ReferenceTokenizer(GetParam());
  int index = 0;
  for (const auto& c : ReferenceCases(GetParam())) {
    const auto ids = tokenizer.Encode(c.text, /*add_special_tokens=*/false);
    ASSERT_TRUE(ids.ok()) << ids.status();
    EXPECT_EQ(*ids, c.ids) << "case " << index << ": " << c.text;
    ++index;
  }
  EXPECT_GT(index, 0);
}

TEST_P(ReferenceTest, EncodeWithSpecialTokens) {
  const Tokenizer& tokenizer = ReferenceTokenizer(GetParam());
  int index = 0;
  for (const auto& c : ReferenceCases(GetParam())) {
    const auto ids = tokenizer.Encode(c.text, /*add_special_tokens=*/true);
    ASSERT_TRUE(ids.ok()) << ids.status();
    EXPECT_EQ(*ids, c.ids_with_special) << "case " << index << ": " << c.text;
    ++index;
  }
}

TEST_P(ReferenceTest, Decode) {
  const Tokenizer& tokenizer = ReferenceTokenizer(GetParam());
  int index = 0;
  for (const auto& c : ReferenceCases(GetParam())) {
    const auto text = tokenizer.Decode(c.ids, /*skip_special_tokens=*/false);
    ASSERT_TRUE(text.ok()) << text.status();
    EXPECT_EQ(*text, c.decoded) << "case " << index;
    ++index;
  }
}

TEST_P(ReferenceTest, IncrementalDetokenizerMatchesDecode) {
  const Tokenizer& tokenizer = ReferenceTokenizer(GetParam());
  int index = 0;
  for (const auto& c : ReferenceCases(GetParam())) {
    IncrementalDetokenizer detokenizer(tokenizer, /*skip_special_tokens=*/false);
    std::string streamed;
    for (const int32_t id : c.ids) {
      const auto piece = detokenizer.Append(id);
      ASSERT_TRUE(piece.ok()) << piece.status();
      streamed += *piece;
    }
    const auto tail = detokenizer.Finish();
    ASSERT_TRUE(tail.ok()) << tail.status();
    streamed += *tail;
    EXPECT_EQ(streamed, c.decoded) << "case " << index;
    ++index;
  }
}

TEST_P(ReferenceTest, IncrementalDetokenizerAfterPromptPrefix) {
  // Split every case into a prompt and a generation: the streamed text must be what the
  // generation adds to the decoded prompt.
  const Tokenizer& tokenizer = ReferenceTokenizer(GetParam());
  int checked = 0;
  for (const auto& c : ReferenceCases(GetParam())) {
    const size_t n = c.ids.size();
    for (const size_t k : {size_t{1}, n / 3, n / 2, n - 1}) {
      if (n < 2 || k == 0 || k >= n) continue;
      const std::vector<int32_t> prompt(c.ids.begin(), c.ids.begin() + k);
      const std::vector<int32_t> generated(c.ids.begin() + k, c.ids.end());
      const std::string prompt_text = *tokenizer.Decode(prompt, false);
      // A prompt cut inside a code point has its own test (the character comes out whole).
      if (prompt_text.ends_with("\xEF\xBF\xBD") || !c.decoded.starts_with(prompt_text)) continue;
      IncrementalDetokenizer detokenizer(tokenizer, /*skip_special_tokens=*/false);
      detokenizer.SetPrefix(prompt);
      std::string streamed;
      for (const int32_t id : generated) streamed += *detokenizer.Append(id);
      streamed += *detokenizer.Finish();
      EXPECT_EQ(streamed, c.decoded.substr(prompt_text.size())) << "prompt of " << k << " ids: " << c.text;
      ++checked;
    }
  }
  EXPECT_GT(checked, 100);
}

TEST_P(ReferenceTest, ConcurrentEncodesAgree) {
  // The word cache is shared between threads; results must not depend on interleaving.
  const Tokenizer& tokenizer = ReferenceTokenizer(GetParam());
  const auto& cases = ReferenceCases(GetParam());
  std::vector<std::thread> threads;
  std::atomic<int> mismatches = 0;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 5; ++round) {
        for (size_t i = t; i < cases.size() + t; ++i) {
          const auto& c = cases[i % cases.size()];
          const auto ids = tokenizer.Encode(c.text, false);
          if (!ids.ok() || *ids != c.ids) ++mismatches;
        }
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(mismatches.load(), 0);
}

INSTANTIATE_TEST_SUITE_P(Tokenizers, ReferenceTest, ::testing::Values("llama2", "llama3", "qwen3"),
                         [](const auto& info) { return info.param; });

TEST(ReferenceTokenizers, SpecialTokensFromConfig) {
  const Tokenizer& llama2 = ReferenceTokenizer("llama2");
  EXPECT_EQ(llama2.bos_token_id(), 1);
  EXPECT_EQ(llama2.eos_token_ids(), std::vector<int32_t>{2});
  EXPECT_EQ(llama2.vocab_size(), 32000);
  EXPECT_TRUE(llama2.IsSpecial(1));
  EXPECT_FALSE(llama2.IsSpecial(100));

  const Tokenizer& llama3 = ReferenceTokenizer("llama3");
  EXPECT_EQ(llama3.bos_token_id(), 128000);
  EXPECT_EQ(llama3.eos_token_ids(), std::vector<int32_t>{128001});
  EXPECT_EQ(llama3.vocab_size(), 128256);
  EXPECT_EQ(llama3.TokenToId("<|eot_id|>"), 128009);

  const Tokenizer& qwen3 = ReferenceTokenizer("qwen3");
  EXPECT_EQ(qwen3.bos_token_id(), std::nullopt);
  EXPECT_EQ(qwen3.eos_token_ids(), std::vector<int32_t>{151645});
  EXPECT_EQ(qwen3.TokenToId("<|im_start|>"), 151644);
  // <think> is an added token but not a special one.
  const auto think = qwen3.TokenToId("<think>");
  ASSERT_TRUE(think.has_value());
  EXPECT_FALSE(qwen3.IsSpecial(*think));
}

TEST(ReferenceTokenizers, SkipSpecialTokens) {
  const Tokenizer& llama3 = ReferenceTokenizer("llama3");
  const auto ids = llama3.Encode("<|begin_of_text|>Hello<|eot_id|>", false);
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(ids->front(), 128000);
  EXPECT_EQ(ids->back(), 128009);
  EXPECT_EQ(*llama3.Decode(*ids, /*skip_special_tokens=*/true), "Hello");
  EXPECT_EQ(*llama3.Decode(*ids, /*skip_special_tokens=*/false), "<|begin_of_text|>Hello<|eot_id|>");

  const Tokenizer& qwen3 = ReferenceTokenizer("qwen3");
  const auto chat = qwen3.Encode("<|im_start|>user\n<think>x</think><|im_end|>", false);
  ASSERT_TRUE(chat.ok());
  EXPECT_EQ(*qwen3.Decode(*chat, /*skip_special_tokens=*/true), "user\n<think>x</think>");
}

}  // namespace
}  // namespace llm
