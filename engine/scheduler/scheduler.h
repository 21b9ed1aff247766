// Scheduler: decides, every step, which sequences run and how many of their tokens.
//  1. Running sequences in priority order: a decode takes one token, a prefill continues with a
//     chunk. When the KV pool is short, the lowest-priority, latest running sequences are
//     preempted (blocks freed; recomputed later with identical output) until the need is met.
//  2. Waiting sequences are admitted in priority/FCFS order while the token budget, the sequence
//     limit and the KV pool allow; a long prompt is split into chunks across steps, so it never
//     stalls the running decodes.
// With pipeline micro-batches, the sequence limit of a step is also an even share of the active
// sequences, and sequences of a step still in flight are left for the next one.
// It owns the KV block pool; it never touches the device.
#pragma once

#include <set>
#include <vector>

#include "engine/kv_cache/kv_block_pool.h"
#include "engine/scheduler/scheduler_config.h"
#include "engine/model/step_plan.h"
#include "engine/scheduler/sequence.h"

namespace llm {

struct ScheduledSequence {
  Sequence* seq = nullptr;
  int32_t start = 0;       // its first token's position
  int32_t num_tokens = 0;  // fed this step
  bool sample = false;     // the step reaches the end of its tokens: sample the next one
  // With sample: the input row of its pending token (a placeholder) in this step, else -1.
  int32_t pending_input_index = -1;
};

class Scheduler {
 public:
  explicit Scheduler(const SchedulerOptions& options);

  void AddWaiting(Sequence* seq);
  // Takes `seq` out of whichever queue holds it and frees its blocks.
  void Remove(Sequence* seq);

  // Fills `plan` and `scheduled`; false when there is nothing to run. The scheduled sequences
  // count as launched from here on: their num_computed advances past the step's tokens, in_flight
  // counts the step and, where the step samples, pending_tokens its token (the engine reverses
  // the last two when it collects the step).
  bool Schedule(StepPlan& plan, std::vector<ScheduledSequence>& scheduled);

  bool empty() const { return running_.empty() && waiting_.empty(); }
  SchedulerStats stats() const;
  const SchedulerOptions& options() const { return options_; }
  // Every sequence known to the scheduler (for deadline sweeps).
  std::vector<Sequence*> AllSequences() const;
  // Forgets every cached block's content (after a failed step, whose writes are unknown).
  void DropPrefixCache() { pool_.ForgetCached(); }

 private:
  struct Order {
    bool operator()(const Sequence* a, const Sequence* b) const {
      if (a->request.priority != b->request.priority) return a->request.priority > b->request.priority;
      return a->arrival_order < b->arrival_order;
    }
  };
  void Preempt(Sequence* seq);
  // Blocks that the running sequences are expected to take as they grow: growth_ratio_ of what
  // each may still generate.
  int64_t GrowthReserve(const Sequence* seq) const;
  // Whether `seq` has tokens to feed now.
  bool Ready(const Sequence* seq) const;
  // A sequence with nothing computed takes the longest cached prefix of its known tokens (never
  // its last token: a step must compute at least one, so that it has logits).
  void MatchCachedPrefix(Sequence* seq);
  // Publishes `seq`'s full blocks whose tokens are known and computed by the end of this step.
  void PublishFullBlocks(Sequence* seq, int32_t computed_after);
  // Adds `seq`'s next `n` tokens to the plan (placeholders for a pending token) and marks it launched.
  void Launch(Sequence* seq, int32_t n, StepPlan& plan, std::vector<ScheduledSequence>& scheduled);

  SchedulerOptions options_;
  KvBlockPool pool_;
  std::set<Sequence*, Order> waiting_;
  std::set<Sequence*, Order> running_;
  uint64_t preemptions_ = 0;
  uint64_t prefix_queried_ = 0, prefix_hits_ = 0;
  // Admission control: a waiting sequence is admitted only when the free blocks cover its prompt
  // and the expected growth of every running sequence and its own, expected growth being this
  // fraction of the tokens each may still generate. It starts at kInitialGrowthRatio, decays
  // towards kMinGrowthRatio while nothing is preempted (requests that stop early leave room) and
  // rises after a preemption (requests grew more than expected): without it, a burst of long
  // requests is admitted at once and then preempts itself over and over (recomputation).
  static constexpr double kInitialGrowthRatio = 0.7, kMinGrowthRatio = 0.1, kGrowthRatioDecay = 0.001;
  double growth_ratio_ = kInitialGrowthRatio;
  std::vector<int32_t> chunk_;  // one sequence's step tokens, placeholders resolved to ids
};

}  // namespace llm
