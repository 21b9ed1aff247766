// Building blocks whose exact behavior the reference library fixes: lossy UTF-8 decoding, the
// regex classes, delimiter behaviors and byte-level decoding of broken sequences.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "engine/tokenizer/regex.h"
#include "engine/tokenizer/split.h"
#include "engine/tokenizer/utf8.h"
#include "tests/tokenizer/tokenizer_test_util.h"

namespace llm::tokenizer_internal {
namespace {

const std::string kFffd = "\xEF\xBF\xBD";

TEST(Utf8, LossyReplacesEachMaximalInvalidSubpart) {
  EXPECT_EQ(Utf8Lossy("Hello\xF0\x90\x80World"), "Hello" + kFffd + "World");  // truncated 4-byte
  EXPECT_EQ(Utf8Lossy("\xE0\x80"), kFffd + kFffd);                             // E0 needs A0..BF next
  EXPECT_EQ(Utf8Lossy("\xED\xA0\x80"), kFffd + kFffd + kFffd);                 // surrogate
  EXPECT_EQ(Utf8Lossy("\xF4\x90\x80\x80"), kFffd + kFffd + kFffd + kFffd);     // past U+10FFFF
  EXPECT_EQ(Utf8Lossy("a\xC3"), "a" + kFffd);
  EXPECT_EQ(Utf8Lossy("\xFF\x80z"), kFffd + kFffd + "z");
  EXPECT_EQ(Utf8Lossy("ok \xE2\x82\xAC"), "ok \xE2\x82\xAC");
}

TEST(Utf8, Validation) {
  EXPECT_TRUE(IsValidUtf8(""));
  EXPECT_TRUE(IsValidUtf8("plain ascii, long enough to take the eight-byte path"));
  EXPECT_TRUE(IsValidUtf8("\xF0\x9F\x98\x80 \xE4\xB8\xAD"));
  EXPECT_FALSE(IsValidUtf8("eight ok\x80"));
  EXPECT_FALSE(IsValidUtf8("\xC0\xAF"));  // overlong
  EXPECT_FALSE(IsValidUtf8("\xF0\x9F\x98"));
}

std::vector<std::pair<size_t, size_t>> FindAll(std::string_view pattern, std::string_view text) {
  auto regex = Regex::Compile(pattern);
  EXPECT_TRUE(regex.ok()) << regex.status();
  Regex::Matches matches;
  EXPECT_TRUE((*regex)->FindAll(text, &matches).ok());
  return matches;
}

TEST(Regex, WhitespaceAndWordClassesFollowOniguruma) {
  using Matches = std::vector<std::pair<size_t, size_t>>;
  // U+180E (MONGOLIAN VOWEL SEPARATOR) is a format character, not a space; U+0085 is a space.
  EXPECT_EQ(FindAll(R"(\s+)", "a\xE1\xA0\x8E" "b"), Matches{});
  EXPECT_EQ(FindAll(R"(\s+)", "a\xC2\x85" "b"), (Matches{{1, 3}}));
  EXPECT_EQ(FindAll(R"([^\s\p{L}]+)", "a\xE1\xA0\x8E" "b"), (Matches{{1, 4}}));
  EXPECT_EQ(FindAll(R"(\S+)", "a\xE1\xA0\x8E" "b c"), (Matches{{0, 5}, {6, 7}}));
  // \w takes combining marks, not other numbers such as "²".
  EXPECT_EQ(FindAll(R"(\w+)", "e\xCC\x81x\xC2\xB2"), (Matches{{0, 4}}));
  // Literal brackets and quoting survive the rewrite.
  EXPECT_EQ(FindAll(R"([]\s]+)", "a] b"), (Matches{{1, 3}}));
  EXPECT_EQ(FindAll(R"(\Q\s\E)", "x\\sy"), (Matches{{1, 3}}));
}

TEST(Regex, EmptyMatchesDoNotRepeatAtPreviousEnd) {
  using Matches = std::vector<std::pair<size_t, size_t>>;
  EXPECT_EQ(FindAll("a*", "baa"), (Matches{{0, 0}, {1, 3}}));
  EXPECT_EQ(FindAll("x*", "\xC3\xA9"), (Matches{{0, 0}, {2, 2}}));
}

TEST(Regex, LiteralPattern) {
  auto regex = Regex::CompileLiteral("a.b\\E(");
  ASSERT_TRUE(regex.ok()) << regex.status();
  Regex::Matches matches;
  ASSERT_TRUE((*regex)->FindAll("xa.b\\E(a_b\\E(", &matches).ok());
  EXPECT_EQ(matches, (Regex::Matches{{1, 7}}));
}

std::vector<std::string> Split(std::string_view text, const std::vector<std::pair<size_t, size_t>>& matches,
                               SplitBehavior behavior, bool invert = false) {
  PreTokens out;
  SplitPiece(PreToken{std::string(text), true}, SegmentsFromMatches(text.size(), matches, invert), behavior,
             &out);
  std::vector<std::string> texts;
  for (const auto& piece : out) texts.push_back(piece.text);
  return texts;
}

TEST(Split, DelimiterBehaviors) {
  // "a--b-c" with delimiters "-" at 1, 2 and 4.
  const std::vector<std::pair<size_t, size_t>> dashes = {{1, 2}, {2, 3}, {4, 5}};
  using V = std::vector<std::string>;
  EXPECT_EQ(Split("a--b-c", dashes, SplitBehavior::kRemoved), (V{"a", "b", "c"}));
  EXPECT_EQ(Split("a--b-c", dashes, SplitBehavior::kIsolated), (V{"a", "-", "-", "b", "-", "c"}));
  EXPECT_EQ(Split("a--b-c", dashes, SplitBehavior::kMergedWithPrevious), (V{"a-", "-", "b-", "c"}));
  EXPECT_EQ(Split("a--b-c", dashes, SplitBehavior::kMergedWithNext), (V{"a", "-", "-b", "-c"}));
  EXPECT_EQ(Split("a--b-c", dashes, SplitBehavior::kContiguous), (V{"a", "--", "b", "-", "c"}));
  EXPECT_EQ(Split("a--b-c", dashes, SplitBehavior::kRemoved, /*invert=*/true), (V{"-", "-", "-"}));
}

TEST(ByteDecoding, BrokenSequencesDecodeAsTheReferenceDoes) {
  // Llama-2's ByteFallback decoder: one U+FFFD per byte of an invalid run.
  const Tokenizer& llama2 = testing::ReferenceTokenizer("llama2");
  const std::vector<int32_t> two_bytes = {*llama2.TokenToId("<0xF0>"), *llama2.TokenToId("<0x9F>"),
                                          *llama2.TokenToId("\xE2\x96\x81" "a")};
  EXPECT_EQ(*llama2.Decode(two_bytes, false), kFffd + kFffd + " a");
  // Llama-3's ByteLevel decoder: from_utf8_lossy, one U+FFFD per maximal subpart.
  const Tokenizer& llama3 = testing::ReferenceTokenizer("llama3");
  const std::vector<int32_t> truncated = {*llama3.TokenToId("\xC3\xB0"), *llama3.TokenToId("\xC5\x81"),
                                          *llama3.TokenToId("a")};  // bytes F0 9F then "a"
  EXPECT_EQ(*llama3.Decode(truncated, false), kFffd + "a");
}

}  // namespace
}  // namespace llm::tokenizer_internal
