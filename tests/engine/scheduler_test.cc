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
  Scheduler Make(int32_t micro_batches, int32_t max_seqs = 256, bool chain = false, int32_t num_blocks = 4096) {
    SchedulerOptions o;
    o.max_tokens_per_step = 4096;
    o.max_seqs = max_seqs;
    o.block_size = 16;
    o.num_blocks = num_blocks;
    o.block_table_width = 64;
    o.micro_batches = micro_batches;
    o.chain_steps = chain;
    return Scheduler(o);
  }
  // `n` sequences with 8-token prompts, queued in order.
  void AddSequences(Scheduler& s, int n) {
    for (int i = 0; i < n; ++i) {
      auto seq = std::make_unique<Sequence>();
      seq->id = static_cast<RequestId>(seqs_.size() + 1);
      seq->arrival_order = seqs_.size();
      // Each prompt its own tokens: no prefix is shared unless a test makes one.
      seq->tokens.assign(prompt_len_, static_cast<int32_t>(seqs_.size() + 1));
      seq->prompt_len = prompt_len_;
      seq->request.stop.max_tokens = max_tokens_;
      s.AddWaiting(seq.get());
      seqs_.push_back(std::move(seq));
    }
  }
  // What the engine does when it collects a launched step: the step no longer holds its
  // sequences, and each sampled token (here always 2) becomes known.
  static void Collect(const std::vector<ScheduledSequence>& step) {
    for (const ScheduledSequence& s : step) {
      --s.seq->in_flight;
      if (s.sample) {
        s.seq->tokens.push_back(2);
        --s.seq->pending_tokens;
      }
    }
  }

  // Schedules two steps in a row (both then in flight), as the engine does with two pipeline
  // stages or with overlapped steps.
  void LaunchTwo(Scheduler& s, std::vector<ScheduledSequence>& a, std::vector<ScheduledSequence>& b) {
    ASSERT_TRUE(s.Schedule(plan_, a));
    ASSERT_TRUE(s.Schedule(plan_, b));
  }

  std::vector<std::unique_ptr<Sequence>> seqs_;
  StepPlan plan_;
  int32_t prompt_len_ = 8;
  int32_t max_tokens_ = 100;
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

// Overlapped steps: while the prefill step is in flight the next step already decodes the
// sequence, its input the placeholder -(row + 1) for the token the prefill samples in that row;
// the sampler counts that token as an output (pending_input_index). Each later step names the
// step just before it.
TEST_F(SchedulerTest, ChainedStepsFeedThePendingTokenAsAPlaceholder) {
  Scheduler s = Make(1, 256, /*chain=*/true);
  AddSequences(s, 2);
  std::vector<ScheduledSequence> a, b, c;
  LaunchTwo(s, a, b);
  ASSERT_EQ(a.size(), 2u);
  ASSERT_EQ(b.size(), 2u);
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(a[i].num_tokens, 8);
    EXPECT_TRUE(a[i].sample);
    EXPECT_EQ(b[i].start, 8);
    EXPECT_EQ(b[i].num_tokens, 1);
    EXPECT_EQ(b[i].pending_input_index, i);
    EXPECT_EQ(plan_.token_ids[i], -(i + 1)) << "row i of the step before";
    EXPECT_EQ(plan_.positions[i], 8);
    EXPECT_EQ(b[i].seq->pending_tokens, 2);
    EXPECT_EQ(b[i].seq->in_flight, 2);
  }
  Collect(a);
  ASSERT_TRUE(s.Schedule(plan_, c));
  ASSERT_EQ(c.size(), 2u);
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(c[i].start, 9);
    EXPECT_EQ(plan_.token_ids[i], -(i + 1));
    EXPECT_EQ(c[i].seq->tokens.size(), 9u) << "the prefill's token is known";
  }
}

// Without chained steps a sequence in flight waits for its step (pipeline micro-batches).
TEST_F(SchedulerTest, UnchainedStepsNeverFeedPendingTokens) {
  Scheduler s = Make(1);
  AddSequences(s, 1);
  std::vector<ScheduledSequence> a, b;
  ASSERT_TRUE(s.Schedule(plan_, a));
  EXPECT_FALSE(s.Schedule(plan_, b));
  Collect(a);
  ASSERT_TRUE(s.Schedule(plan_, b));
  EXPECT_GE(plan_.token_ids[0], 0);
}

// A sequence whose pending token is its last allowed one is not scheduled again: it finishes when
// that token is collected, so no step computes a token it could never send.
TEST_F(SchedulerTest, NoStepPastMaxTokens) {
  max_tokens_ = 2;
  Scheduler s = Make(1, 256, /*chain=*/true);
  AddSequences(s, 1);
  std::vector<ScheduledSequence> a, b, c;
  LaunchTwo(s, a, b);
  EXPECT_EQ(b[0].seq->scheduled_completion_tokens(), 2);
  EXPECT_FALSE(s.Schedule(plan_, c));
  Collect(a);
  EXPECT_FALSE(s.Schedule(plan_, c));
}

// Preempting a sequence that a launched step holds frees its blocks at once (later steps run
// after that one on every rank); its pending token is kept and, when it is resumed before that
// token is collected, prefilled as a placeholder with its known tokens.
TEST_F(SchedulerTest, PreemptionOfAnInFlightSequenceKeepsItsPendingToken) {
  prompt_len_ = 16;  // one full block each
  max_tokens_ = 3;   // small: admission reserves (almost) nothing for their growth
  // Two sequences of 16 tokens fit in 2 blocks; their decode steps need a third block each.
  Scheduler s = Make(1, 256, /*chain=*/true, /*num_blocks=*/3);
  AddSequences(s, 2);
  std::vector<ScheduledSequence> a, b, c;
  ASSERT_TRUE(s.Schedule(plan_, a));
  ASSERT_EQ(a.size(), 2u);
  ASSERT_TRUE(s.Schedule(plan_, b));  // the first gets the third block; the second is preempted
  ASSERT_EQ(b.size(), 1u);
  Sequence* second = a[1].seq;
  EXPECT_EQ(second->num_computed, 0);
  EXPECT_EQ(second->pending_tokens, 1);
  EXPECT_EQ(second->preemptions, 1);
  EXPECT_TRUE(second->blocks.blocks().empty());
  EXPECT_EQ(s.stats().waiting, 1);
  // The first finishes; the second resumes with its 16 known tokens and the placeholder.
  Collect(a);
  s.Remove(a[0].seq);
  Collect(b);
  ASSERT_TRUE(s.Schedule(plan_, c));
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].seq, second);
  // Its first block was published when computed and stayed cached when preempted: it resumes
  // after it.
  EXPECT_EQ(c[0].start, 16);
  EXPECT_EQ(c[0].num_tokens, 1);
  EXPECT_GE(plan_.token_ids[0], 0) << "its token was collected meanwhile";
}

// The same without prefix caching: everything is recomputed.
TEST_F(SchedulerTest, PreemptedSequenceRecomputesWithoutPrefixCaching) {
  prompt_len_ = 16;
  max_tokens_ = 3;
  SchedulerOptions o;
  o.max_tokens_per_step = 4096;
  o.max_seqs = 256;
  o.block_size = 16;
  o.num_blocks = 3;
  o.block_table_width = 64;
  o.chain_steps = true;
  o.prefix_caching = false;
  Scheduler s(o);
  AddSequences(s, 2);
  std::vector<ScheduledSequence> a, b, c;
  ASSERT_TRUE(s.Schedule(plan_, a));
  ASSERT_TRUE(s.Schedule(plan_, b));
  Sequence* second = a[1].seq;
  EXPECT_EQ(second->preemptions, 1);
  Collect(a);
  s.Remove(a[0].seq);
  Collect(b);
  ASSERT_TRUE(s.Schedule(plan_, c));
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].num_tokens, 17);
  EXPECT_GE(plan_.token_ids[16], 0);
}

// Admission counts the expected growth of the running sequences: a burst of long requests is not
// all admitted at once (each would soon need more blocks and preempt the others), but the first
// always starts.
TEST_F(SchedulerTest, AdmissionReservesRoomForGrowth) {
  prompt_len_ = 16;
  max_tokens_ = 16 * 20;  // up to 20 more blocks each
  Scheduler s = Make(1, 256, /*chain=*/true, /*num_blocks=*/40);
  AddSequences(s, 4);
  std::vector<ScheduledSequence> a;
  ASSERT_TRUE(s.Schedule(plan_, a));
  // 40 blocks: 1 + 14 (0.7 x 20) for the first, 15 more for the second; a third does not fit.
  EXPECT_EQ(a.size(), 2u);
  EXPECT_EQ(s.stats().waiting, 2);
  // Short requests fill the rest.
  max_tokens_ = 16;
  AddSequences(s, 3);
  std::vector<ScheduledSequence> b;
  ASSERT_TRUE(s.Schedule(plan_, b));
  EXPECT_EQ(b.size(), 2u) << "the two running ones; FCFS keeps the short ones behind the long waiting ones";
}

}  // namespace
}  // namespace llm
