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
#include "engine/model/step_plan.h"
#include "engine/scheduler/sequence.h"

namespace llm {

struct SchedulerOptions {
  int32_t max_tokens_per_step = 2048;
  int32_t max_seqs = 256;
  int32_t block_size = 16;
  int32_t num_blocks = 0;
  int32_t block_table_width = 0;
  // Steps in flight at once (the pipeline's micro-batches; set by the engine from its executor).
  // Above 1, a step takes at most ceil(active sequences / micro_batches) of them, so that the
  // micro-batches stay about the same size: the pipeline runs at the pace of its largest one.
  int32_t micro_batches = 1;
};

struct ScheduledSequence {
  Sequence* seq = nullptr;
  int32_t num_tokens = 0;  // fed this step, from seq->num_computed
  bool sample = false;     // the step reaches the end of its tokens: sample the next one
};

struct SchedulerStats {
  int32_t running = 0;
  int32_t waiting = 0;
  int32_t kv_blocks_used = 0;
  int32_t kv_blocks_total = 0;
  uint64_t preemptions = 0;
};

class Scheduler {
 public:
  explicit Scheduler(const SchedulerOptions& options);

  void AddWaiting(Sequence* seq);
  // Takes `seq` out of whichever queue holds it and frees its blocks.
  void Remove(Sequence* seq);

  // Fills `plan` and `scheduled`; false when there is nothing to run.
  bool Schedule(StepPlan& plan, std::vector<ScheduledSequence>& scheduled);

  bool empty() const { return running_.empty() && waiting_.empty(); }
  SchedulerStats stats() const;
  const SchedulerOptions& options() const { return options_; }
  // Every sequence known to the scheduler (for deadline sweeps).
  std::vector<Sequence*> AllSequences() const;

 private:
  struct Order {
    bool operator()(const Sequence* a, const Sequence* b) const {
      if (a->request.priority != b->request.priority) return a->request.priority > b->request.priority;
      return a->arrival_order < b->arrival_order;
    }
  };
  void Preempt(Sequence* seq);

  SchedulerOptions options_;
  KvBlockPool pool_;
  std::set<Sequence*, Order> waiting_;
  std::set<Sequence*, Order> running_;
  uint64_t preemptions_ = 0;
};

}  // namespace llm
