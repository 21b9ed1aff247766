#include "engine/scheduler/stop_checker.h"

#include "gtest/gtest.h"

namespace llm {
namespace {

TEST(StopCheckerTest, StopStringSplitAcrossTokensIsHeldBackAndCut) {
  StopCriteria c;
  c.max_tokens = 100;
  c.stop_strings = {"END"};
  StopChecker s(c, {});
  std::string streamed;
  EXPECT_EQ(s.OnToken(10, 1, "hello E"), FinishReason::kNone);
  streamed += s.TakeText(false);
  EXPECT_EQ(streamed, "hello ");  // "E" might start "END": held back
  EXPECT_EQ(s.OnToken(11, 2, "N"), FinishReason::kNone);
  streamed += s.TakeText(false);
  EXPECT_EQ(streamed, "hello ");
  EXPECT_EQ(s.OnToken(12, 3, "D and more"), FinishReason::kStop);
  streamed += s.TakeText(true);
  EXPECT_EQ(streamed, "hello ");
}

TEST(StopCheckerTest, HeldBackTextIsReleasedWhenItCannotMatch) {
  StopCriteria c;
  c.max_tokens = 100;
  c.stop_strings = {"END"};
  StopChecker s(c, {});
  std::string streamed;
  s.OnToken(1, 1, "xE");
  streamed += s.TakeText(false);
  s.OnToken(2, 2, "x");
  streamed += s.TakeText(false);
  EXPECT_EQ(streamed, "xEx");
}

TEST(StopCheckerTest, EosStopTokensMinAndMaxTokens) {
  StopCriteria c;
  c.max_tokens = 5;
  c.min_tokens = 2;
  c.stop_token_ids = {7};
  StopChecker s(c, {2});
  EXPECT_EQ(s.OnToken(2, 1, ""), FinishReason::kNone);  // eos before min_tokens
  EXPECT_EQ(s.OnToken(2, 2, ""), FinishReason::kEos);
  StopChecker t(c, {2});
  EXPECT_EQ(t.OnToken(7, 2, ""), FinishReason::kStop);
  StopChecker u(c, {2});
  EXPECT_EQ(u.OnToken(3, 5, ""), FinishReason::kLength);
  c.ignore_eos = true;
  StopChecker v(c, {2});
  EXPECT_EQ(v.OnToken(2, 3, ""), FinishReason::kNone);
}

}  // namespace
}  // namespace llm
