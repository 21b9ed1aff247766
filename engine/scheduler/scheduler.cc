#include "engine/scheduler/scheduler.h"

#include <algorithm>

namespace llm {

Scheduler::Scheduler(const SchedulerOptions& options) : options_(options), pool_(options.num_blocks) {}

void Scheduler::AddWaiting(Sequence* seq) {
  seq->running = false;
  waiting_.insert(seq);
}

void Scheduler::Remove(Sequence* seq) {
  waiting_.erase(seq);
  running_.erase(seq);
  seq->blocks.Release(pool_);
  seq->running = false;
}

void Scheduler::Preempt(Sequence* seq) {
  running_.erase(seq);
  seq->blocks.Release(pool_);
  seq->num_computed = 0;  // recompute prompt + generated tokens when resumed
  ++seq->preemptions;
  ++preemptions_;
  AddWaiting(seq);
}

bool Scheduler::Schedule(StepPlan& plan, std::vector<ScheduledSequence>& scheduled) {
  plan.block_table_width = options_.block_table_width;
  plan.Clear();
  scheduled.clear();
  int32_t budget = options_.max_tokens_per_step;
  const int32_t bs = options_.block_size;
  int32_t max_seqs = options_.max_seqs;
  if (options_.micro_batches > 1) {
    const int64_t active = static_cast<int64_t>(running_.size() + waiting_.size());
    const int64_t share = (active + options_.micro_batches - 1) / options_.micro_batches;
    max_seqs = static_cast<int32_t>(std::clamp<int64_t>(share, 1, max_seqs));
  }

  // 1. Running sequences, highest priority first; preempt from the other end when short of blocks.
  // Sequences in an in-flight step are neither scheduled again nor preempted until it returns.
  std::vector<Sequence*> order;
  for (Sequence* seq : running_)
    if (!seq->in_flight) order.push_back(seq);
  size_t end = order.size();
  for (size_t i = 0; i < end && budget > 0 && static_cast<int32_t>(scheduled.size()) < max_seqs; ++i) {
    Sequence* seq = order[i];
    const int32_t remaining = static_cast<int32_t>(seq->tokens.size()) - seq->num_computed;
    const int32_t n = std::min(remaining, budget);
    bool ok = seq->blocks.Reserve(seq->num_computed + n, bs, pool_);
    while (!ok && end > i + 1) {
      Preempt(order[--end]);
      ok = seq->blocks.Reserve(seq->num_computed + n, bs, pool_);
    }
    if (!ok) {  // nothing left to take from: this sequence itself waits
      Preempt(seq);
      end = i;
      break;
    }
    scheduled.push_back({seq, n, seq->num_computed + n == static_cast<int32_t>(seq->tokens.size())});
    budget -= n;
  }

  // 2. Admit waiting sequences in order while there is room; stop at the first that does not fit
  //    (FCFS: a later, smaller request never overtakes an earlier one of the same priority).
  while (!waiting_.empty() && budget > 0 && static_cast<int32_t>(scheduled.size()) < max_seqs) {
    Sequence* seq = *waiting_.begin();
    const int32_t remaining = static_cast<int32_t>(seq->tokens.size()) - seq->num_computed;
    const int32_t n = std::min(remaining, budget);
    if (!seq->blocks.Reserve(seq->num_computed + n, bs, pool_)) break;
    waiting_.erase(waiting_.begin());
    running_.insert(seq);
    seq->running = true;
    scheduled.push_back({seq, n, seq->num_computed + n == static_cast<int32_t>(seq->tokens.size())});
    budget -= n;
  }

  for (const ScheduledSequence& s : scheduled) {
    Sequence* seq = s.seq;
    plan.AddSequence(absl::MakeConstSpan(seq->tokens).subspan(seq->num_computed, s.num_tokens), seq->num_computed,
                     seq->blocks.blocks(), bs, s.sample);
  }
  return !scheduled.empty();
}

SchedulerStats Scheduler::stats() const {
  SchedulerStats s;
  s.running = static_cast<int32_t>(running_.size());
  s.waiting = static_cast<int32_t>(waiting_.size());
  s.kv_blocks_used = pool_.num_used();
  s.kv_blocks_total = pool_.num_blocks();
  s.preemptions = preemptions_;
  return s;
}

std::vector<Sequence*> Scheduler::AllSequences() const {
  std::vector<Sequence*> all(running_.begin(), running_.end());
  all.insert(all.end(), waiting_.begin(), waiting_.end());
  return all;
}

}  // namespace llm
