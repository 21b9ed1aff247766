// The scheduler's step composition: sequence and token limits, and with pipeline micro-batches
// the even share of the active sequences per step (engine/scheduler/scheduler.h). The engine's
// own tests check outputs; these check which sequences a step takes.
#include "engine/scheduler/scheduler.h"

#include <memory>
#include <numeric>
#include <vector>

#include "gtest/gtest.h"

namespace llm {
namespace {

class SchedulerTest : public ::testing::Test {
 protected:
  Scheduler Make(int32_t micro_batches, int32_t max_seqs = 256) {
    SchedulerOptions o;
    o.max_tokens_per_step = 4096;
    o.max_seqs = max_seqs;
    o.block_size = 16;
    o.num_blocks = 4096;
    o.block_table_width = 64;
    o.micro_batches = micro_batches;
    return Scheduler(o);
  }
  // `n` sequences with 8-token prompts, queued in order.
  void AddSequences(Scheduler& s, int n) {
    for (int i = 0; i < n; ++i) {
      auto seq = std::make_unique<Sequence>();
      seq->id = static_cast<RequestId>(seqs_.size() + 1);
      seq->arrival_order = seqs_.size();
      seq->tokens.assign(8, 1);
      seq->prompt_len = 8;
      s.AddWaiting(seq.get());
      seqs_.push_back(std::move(seq));
    }
  }
  // What the engine does with a launched step: its sequences are in flight until collected.
  static void Launch(const std::vector<ScheduledSequence>& step) {
    for (const ScheduledSequence& s : step) s.seq->in_flight = true;
  }
  // Collected: the fed tokens are computed and, where sampled, one token is appended.
  static void Collect(const std::vector<ScheduledSequence>& step) {
    for (const ScheduledSequence& s : step) {
      s.seq->num_computed += s.num_tokens;
      s.seq->in_flight = false;
      if (s.sample) s.seq->tokens.push_back(2);
    }
  }

  // Schedules and launches two steps in a row (both then in flight), as the engine does with two
  // pipeline stages.
  void LaunchTwo(Scheduler& s, std::vector<ScheduledSequence>& a, std::vector<ScheduledSequence>& b) {
    ASSERT_TRUE(s.Schedule(plan_, a));
    Launch(a);
    ASSERT_TRUE(s.Schedule(plan_, b));
    Launch(b);
  }

  std::vector<std::unique_ptr<Sequence>> seqs_;
  StepPlan plan_;
};

TEST_F(SchedulerTest, OneMicroBatchTakesEverySequence) {
  Scheduler s = Make(1);
  AddSequences(s, 10);
  std::vector<ScheduledSequence> step;
  ASSERT_TRUE(s.Schedule(plan_, step));
  EXPECT_EQ(step.size(), 10u);
}

// Two micro-batches over 10 sequences: 5 and 5, disjoint; nothing left while both are in flight;
// after the first returns, the next step takes those same 5 again (the decode groups stay even).
TEST_F(SchedulerTest, MicroBatchesSplitTheActiveSequencesEvenly) {
  Scheduler s = Make(2);
  AddSequences(s, 10);
  std::vector<ScheduledSequence> a, b, c, none;
  LaunchTwo(s, a, b);
  EXPECT_EQ(a.size(), 5u);
  EXPECT_EQ(b.size(), 5u);
  for (const ScheduledSequence& x : a)
    for (const ScheduledSequence& y : b) EXPECT_NE(x.seq, y.seq);
  EXPECT_FALSE(s.Schedule(plan_, none));
  Collect(a);
  ASSERT_TRUE(s.Schedule(plan_, c));
  ASSERT_EQ(c.size(), 5u);
  for (size_t i = 0; i < c.size(); ++i) {
    EXPECT_EQ(c[i].num_tokens, 1) << "a decode step";
    EXPECT_EQ(c[i].seq, a[i].seq);
  }
}

// Uneven groups even out: with 7 sequences and 2 micro-batches a step takes at most 4, so a group
// of 3 and one of 4 form, and after two sequences finish (5 active, share 3) the larger group
// leaves one sequence for the next step instead of keeping 4.
TEST_F(SchedulerTest, MicroBatchShareFollowsTheActiveCount) {
  Scheduler s = Make(2);
  AddSequences(s, 7);
  std::vector<ScheduledSequence> a, b;
  LaunchTwo(s, a, b);
  EXPECT_EQ(a.size(), 4u);
  EXPECT_EQ(b.size(), 3u);
  Collect(a);
  Collect(b);
  s.Remove(b[0].seq);
  s.Remove(b[1].seq);
  std::vector<ScheduledSequence> next;
  ASSERT_TRUE(s.Schedule(plan_, next));
  EXPECT_EQ(next.size(), 3u);  // ceil(5 / 2)
}

// The configured sequence limit still bounds a step when the share is larger.
TEST_F(SchedulerTest, MaxSeqsBoundsTheShare) {
  Scheduler s = Make(2, /*max_seqs=*/3);
  AddSequences(s, 10);
  std::vector<ScheduledSequence> a;
  ASSERT_TRUE(s.Schedule(plan_, a));
  EXPECT_EQ(a.size(), 3u);
}

}  // namespace
}  // namespace llm
