// Streaming detokenization: no broken UTF-8 ever leaves Append, held-back bytes come out once the
// code point completes, and a prompt prefix keeps SentencePiece's leading space where it belongs.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "engine/tokenizer/tokenizer.h"
#include "tests/tokenizer/tokenizer_test_util.h"

namespace llm {
namespace {

using testing::ReferenceTokenizer;

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";

// Streams `ids` and returns each Append's output, then Finish's.
std::vector<std::string> Stream(const Tokenizer& tokenizer, const std::vector<int32_t>& prompt,
                                const std::vector<int32_t>& ids, bool skip_special_tokens = false) {
  IncrementalDetokenizer detokenizer(tokenizer, skip_special_tokens);
  if (!prompt.empty()) detokenizer.SetPrefix(prompt);
  std::vector<std::string> pieces;
  for (const int32_t id : ids) {
    auto piece = detokenizer.Append(id);
    EXPECT_TRUE(piece.ok()) << piece.status();
    pieces.push_back(piece.ok() ? *piece : "");
  }
  auto tail = detokenizer.Finish();
  EXPECT_TRUE(tail.ok()) << tail.status();
  pieces.push_back(tail.ok() ? *tail : "");
  return pieces;
}

std::string Join(const std::vector<std::string>& pieces) {
  std::string joined;
  for (const auto& piece : pieces) joined += piece;
  return joined;
}

std::vector<int32_t> Encode(const Tokenizer& tokenizer, const std::string& text, bool special = false) {
  auto ids = tokenizer.Encode(text, special);
  EXPECT_TRUE(ids.ok()) << ids.status();
  return ids.ok() ? *ids : std::vector<int32_t>();
}

TEST(IncrementalDetokenizer, HoldsBackByteFallbackTokensUntilCodePointCompletes) {
  const Tokenizer& llama2 = ReferenceTokenizer("llama2");
  // 👨 is not in the Llama-2 vocabulary: it is four <0x..> byte tokens.
  const auto ids = Encode(llama2, "a👨b");
  const auto byte_f0 = llama2.TokenToId("<0xF0>");
  ASSERT_TRUE(byte_f0.has_value());
  const auto first_byte = std::find(ids.begin(), ids.end(), *byte_f0);
  ASSERT_NE(first_byte, ids.end());
  const size_t k = first_byte - ids.begin();
  ASSERT_LE(k + 4, ids.size());

  const auto pieces = Stream(llama2, {}, ids);
  EXPECT_EQ(pieces[k], "");
  EXPECT_EQ(pieces[k + 1], "");
  EXPECT_EQ(pieces[k + 2], "");
  EXPECT_EQ(pieces[k + 3], "👨");
  EXPECT_EQ(Join(pieces), *llama2.Decode(ids, false));
  for (const auto& piece : pieces) EXPECT_EQ(piece.find(kReplacement), std::string::npos) << piece;
}

TEST(IncrementalDetokenizer, HoldsBackByteLevelTokensUntilCodePointCompletes) {
  for (const char* name : {"llama3", "qwen3"}) {
    const Tokenizer& tokenizer = ReferenceTokenizer(name);
    // Emoji that these vocabularies split over several byte-level tokens.
    const std::string text = "ok 🫠🦩🧌 𓀀 done";
    const auto ids = Encode(tokenizer, text);
    const auto pieces = Stream(tokenizer, {}, ids);
    EXPECT_EQ(Join(pieces), text) << name;
    size_t held = 0;
    for (const auto& piece : pieces) {
      EXPECT_EQ(piece.find(kReplacement), std::string::npos) << name << ": " << piece;
      if (piece.empty()) ++held;
    }
    EXPECT_GT(held, 0u) << name << ": expected some emoji to span several tokens";
  }
}

TEST(IncrementalDetokenizer, FinishFlushesIncompleteSequenceAsDecodeDoes) {
  // Characters these vocabularies spell with several byte tokens.
  for (const auto& [name, text] : {std::pair{"llama2", "x👨"}, std::pair{"llama3", "x🫠"}}) {
    const Tokenizer& tokenizer = ReferenceTokenizer(name);
    auto ids = Encode(tokenizer, text);
    ids.pop_back();  // cut the emoji short
    const auto pieces = Stream(tokenizer, {}, ids);
    const std::string decoded = *tokenizer.Decode(ids, false);
    EXPECT_TRUE(decoded.ends_with(kReplacement)) << name;
    EXPECT_EQ(Join(pieces), decoded) << name;
  }
}

TEST(IncrementalDetokenizer, PromptPrefixKeepsLeadingSpaceOfFirstGeneratedToken) {
  const Tokenizer& llama2 = ReferenceTokenizer("llama2");
  const auto prompt = Encode(llama2, "Hello", /*special=*/true);
  const auto full = Encode(llama2, "Hello world", /*special=*/true);
  ASSERT_EQ(std::vector<int32_t>(full.begin(), full.begin() + prompt.size()), prompt);
  const std::vector<int32_t> generated(full.begin() + prompt.size(), full.end());

  // After a prompt, "▁world" is " world"; alone it starts the text and loses its space.
  EXPECT_EQ(Join(Stream(llama2, prompt, generated)), " world");
  EXPECT_EQ(Join(Stream(llama2, {}, generated)), "world");
  EXPECT_EQ(Join(Stream(llama2, prompt, generated, /*skip_special_tokens=*/true)), " world");
  // A prompt of only <s> gives no text to attach to when special tokens are skipped, exactly as
  // Decode(<s> ▁world) with skipping gives "world".
  const std::vector<int32_t> bos = {1};
  EXPECT_EQ(Join(Stream(llama2, bos, generated, /*skip_special_tokens=*/true)), "world");
  EXPECT_EQ(Join(Stream(llama2, bos, generated, /*skip_special_tokens=*/false)), " world");
}

TEST(IncrementalDetokenizer, LongPromptOnlySuppliesContext) {
  const Tokenizer& llama3 = ReferenceTokenizer("llama3");
  const auto prompt = Encode(llama3, "The quick brown fox jumps over the lazy dog and", true);
  const auto full = Encode(llama3, "The quick brown fox jumps over the lazy dog and runs 🫠 away", true);
  ASSERT_EQ(std::vector<int32_t>(full.begin(), full.begin() + prompt.size()), prompt);
  const std::vector<int32_t> generated(full.begin() + prompt.size(), full.end());
  EXPECT_EQ(Join(Stream(llama3, prompt, generated)), " runs 🫠 away");
}

TEST(IncrementalDetokenizer, PromptEndingInsideCodePoint) {
  const Tokenizer& llama2 = ReferenceTokenizer("llama2");
  auto ids = Encode(llama2, "a👨");
  const std::vector<int32_t> prompt(ids.begin(), ids.end() - 2);
  const std::vector<int32_t> generated(ids.end() - 2, ids.end());
  // The character begun in the prompt comes out whole with the ids that complete it.
  EXPECT_EQ(Join(Stream(llama2, prompt, generated)), "👨");
}

TEST(IncrementalDetokenizer, SkipsSpecialTokens) {
  const Tokenizer& qwen3 = ReferenceTokenizer("qwen3");
  const auto ids = Encode(qwen3, "<|im_start|>assistant\nHi!<|im_end|>");
  EXPECT_EQ(Join(Stream(qwen3, {}, ids, /*skip_special_tokens=*/true)), "assistant\nHi!");
  EXPECT_EQ(Join(Stream(qwen3, {}, ids, /*skip_special_tokens=*/false)), "<|im_start|>assistant\nHi!<|im_end|>");
}

TEST(IncrementalDetokenizer, RejectsOutOfRangeId) {
  const Tokenizer& llama3 = ReferenceTokenizer("llama3");
  IncrementalDetokenizer detokenizer(llama3, false);
  EXPECT_EQ(detokenizer.Append(llama3.vocab_size()).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(detokenizer.Append(-1).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace llm
