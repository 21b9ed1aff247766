// Generated texts (fixed seed) over a mixed alphabet: byte-level and byte-fallback BPE lose
// nothing, so Decode(Encode(x)) == x; NFC (Qwen3) makes Encode idempotent through Decode; and the
// streamed decode always equals Decode.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "engine/tokenizer/tokenizer.h"
#include "tests/tokenizer/tokenizer_test_util.h"

namespace llm {
namespace {

using testing::ReferenceTokenizer;

// Pieces chosen to hit the regex branches, byte fallback, multi-token code points, contractions,
// digits and whitespace runs. `with_specials` adds added-token text and its fragments.
std::string RandomText(std::mt19937& rng, bool with_specials) {
  static const std::vector<std::string> kPieces = {
      "a", "Z", "the", " ", "  ", "\t", "\n", "\r\n", "0", "42", "12345", "'s", "'LL", "-", "()", "{}",
      ".", "é", "e\xCC\x81", "ß", "日本", "語", "한", "ไทย", "Ω", "😀", "👨\u200d👩", "🫠", "🇯🇵", "\u200b",
      "x\xE1\xA0\x8E", "\xC2\x85", "\xEF\xBF\xBD", "$", "\\", "\"", "    ", "def ", "return", "ſ"};
  static const std::vector<std::string> kSpecials = {"<|begin_of_text|>", "<|eot_id|>", "<|im_start|>",
                                                     "<think>", "<|", "|>", "<s>", "</s>", "<unk>"};
  std::uniform_int_distribution<int> length(0, 24);
  std::string text;
  const int n = length(rng);
  for (int i = 0; i < n; ++i) {
    if (with_specials && rng() % 8 == 0) {
      text += kSpecials[rng() % kSpecials.size()];
    } else {
      text += kPieces[rng() % kPieces.size()];
    }
  }
  return text;
}

std::string Stream(const Tokenizer& tokenizer, const std::vector<int32_t>& ids) {
  IncrementalDetokenizer detokenizer(tokenizer, false);
  std::string out;
  for (const int32_t id : ids) out += *detokenizer.Append(id);
  return out + *detokenizer.Finish();
}

class RoundTripTest : public ::testing::TestWithParam<std::string> {};

TEST_P(RoundTripTest, GeneratedTexts) {
  const std::string name = GetParam();
  const Tokenizer& tokenizer = ReferenceTokenizer(name);
  // Llama-2 turns spaces into "▁" and prepends one after every added token, so only the plain
  // texts come back unchanged there.
  const bool with_specials = name != "llama2";
  std::mt19937 rng(1234);
  for (int i = 0; i < 400; ++i) {
    const std::string text = RandomText(rng, with_specials);
    const auto ids = tokenizer.Encode(text, false);
    ASSERT_TRUE(ids.ok()) << ids.status();
    const auto decoded = tokenizer.Decode(*ids, false);
    ASSERT_TRUE(decoded.ok()) << decoded.status();
    if (name == "qwen3") {
      EXPECT_EQ(*tokenizer.Encode(*decoded, false), *ids) << text;
    } else {
      EXPECT_EQ(*decoded, text);
    }
    EXPECT_EQ(Stream(tokenizer, *ids), *decoded) << text;
  }
}

INSTANTIATE_TEST_SUITE_P(Tokenizers, RoundTripTest, ::testing::Values("llama2", "llama3", "qwen3"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace llm
