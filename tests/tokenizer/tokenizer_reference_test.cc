// Every reference case of every tokenizer: Encode with and without special tokens, Decode, and the
// incremental detokenizer, all exactly as the `tokenizers` library does them.
#include <gtest/gtest.h>

#include <string>

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
