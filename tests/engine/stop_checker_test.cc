#include "engine/scheduler/stop_checker.h"

#include "gtest/gtest.h"

namespace llm {
namespace {

TEST(StopStringMatcherTest, StopStringSplitAcrossTokensIsHeldBackAndCut) {
  StopCriteria c;
  c.max_tokens = 100;
  c.stop_strings = {"END"};
  StopStringMatcher s(c);
  std::string streamed;
  EXPECT_FALSE(s.Append("hello E", 1));
  streamed += s.TakeText(false);
  EXPECT_EQ(streamed, "hello ");  // "E" might start "END": held back
  EXPECT_FALSE(s.Append("N", 2));
  streamed += s.TakeText(false);
  EXPECT_EQ(streamed, "hello ");
  EXPECT_TRUE(s.Append("D and more", 3));
  EXPECT_TRUE(s.matched());
  streamed += s.TakeText(true);
  EXPECT_EQ(streamed, "hello ");
}

TEST(StopStringMatcherTest, HeldBackTextIsReleasedWhenItCannotMatch) {
  StopCriteria c;
  c.max_tokens = 100;
  c.stop_strings = {"END"};
  StopStringMatcher s(c);
  std::string streamed;
  s.Append("xE", 1);
  streamed += s.TakeText(false);
  s.Append("x", 2);
  streamed += s.TakeText(false);
  EXPECT_EQ(streamed, "xEx");
}

TEST(StopStringMatcherTest, NoMatchBeforeMinTokens) {
  StopCriteria c;
  c.max_tokens = 100;
  c.min_tokens = 3;
  c.stop_strings = {"ab"};
  StopStringMatcher s(c);
  EXPECT_FALSE(s.Append("ab", 1));
  EXPECT_FALSE(s.Append("c", 2));
  EXPECT_TRUE(s.Append("ab", 3));
  EXPECT_EQ(s.TakeText(true), "abc");
}

TEST(TokenStopReasonTest, EosStopTokensMinAndMaxTokens) {
  StopCriteria c;
  c.max_tokens = 5;
  c.min_tokens = 2;
  c.stop_token_ids = {7};
  const std::vector<int32_t> eos = {2};
  EXPECT_EQ(TokenStopReason(c, eos, 2, 1), FinishReason::kNone);  // eos before min_tokens
  EXPECT_EQ(TokenStopReason(c, eos, 2, 2), FinishReason::kEos);
  EXPECT_EQ(TokenStopReason(c, eos, 7, 2), FinishReason::kStop);
  EXPECT_EQ(TokenStopReason(c, eos, 3, 5), FinishReason::kLength);
  c.ignore_eos = true;
  EXPECT_EQ(TokenStopReason(c, eos, 2, 3), FinishReason::kNone);
}

}  // namespace
}  // namespace llm
