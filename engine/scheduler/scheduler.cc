#include "engine/scheduler/scheduler.h"

#include <algorithm>

#include "kernels/core/status.h"

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
  // Blocks of a launched step may go to other sequences at once: every rank runs steps in launch
  // order, so a later step's writes to them come after this one's.
  seq->blocks.Release(pool_);
  seq->num_computed = 0;  // recompute prompt + generated tokens when resumed
  ++seq->preemptions;
  ++preemptions_;
  AddWaiting(seq);
}

int64_t Scheduler::GrowthReserve(const Sequence* seq) const {
  const int64_t remaining = std::max(0, seq->request.stop.max_tokens - seq->scheduled_completion_tokens());
  return static_cast<int64_t>(growth_ratio_ * static_cast<double>(remaining) / options_.block_size + 0.5);
}

bool Scheduler::Ready(const Sequence* seq) const {
  if (seq->in_flight > 0 && !options_.chain_steps) return false;
  if (seq->length() <= seq->num_computed) return false;
  // Its last token is pending and it has all it may generate: it finishes when that arrives.
  if (seq->pending_tokens > 0 && seq->scheduled_completion_tokens() >= seq->request.stop.max_tokens) return false;
  return true;
}

void Scheduler::MatchCachedPrefix(Sequence* seq) {
  if (!options_.prefix_caching || seq->num_computed != 0 || !seq->blocks.blocks().empty()) return;
  const int32_t bs = options_.block_size;
  const int32_t known = std::min(static_cast<int32_t>(seq->tokens.size()), seq->length() - 1);
  const int32_t full = known / bs;
  uint64_t parent = seq->salt_hash;
  std::vector<int32_t>& blocks = seq->blocks.mutable_blocks();
  std::vector<uint64_t>& hashes = seq->blocks.mutable_hashes();
  for (int32_t i = 0; i < full; ++i) {
    const uint64_t h = BlockHash(parent, absl::MakeConstSpan(seq->tokens).subspan(i * bs, bs));
    const int32_t b = pool_.Find(h);
    if (b < 0) break;
    pool_.Acquire(b);
    blocks.push_back(b);
    hashes.push_back(h);
    parent = h;
  }
  seq->num_computed = static_cast<int32_t>(blocks.size()) * bs;
}

void Scheduler::PublishFullBlocks(Sequence* seq, int32_t computed_after) {
  if (!options_.prefix_caching) return;
  const int32_t bs = options_.block_size;
  const int32_t full = std::min(computed_after, static_cast<int32_t>(seq->tokens.size())) / bs;
  std::vector<uint64_t>& hashes = seq->blocks.mutable_hashes();
  const std::vector<int32_t>& blocks = seq->blocks.blocks();
  for (int32_t i = static_cast<int32_t>(hashes.size()); i < full && i < static_cast<int32_t>(blocks.size()); ++i) {
    const uint64_t parent = i == 0 ? seq->salt_hash : hashes[i - 1];
    const uint64_t h = BlockHash(parent, absl::MakeConstSpan(seq->tokens).subspan(i * bs, bs));
    // Another block may hold the same content already (computed at the same time): this one then
    // stays private, and the chain goes on from the hash all the same.
    pool_.Publish(blocks[i], h);
    hashes.push_back(h);
  }
}

void Scheduler::Launch(Sequence* seq, int32_t n, StepPlan& plan, std::vector<ScheduledSequence>& scheduled) {
  const int32_t start = seq->num_computed, known = static_cast<int32_t>(seq->tokens.size());
  const bool sample = start + n == seq->length();
  ScheduledSequence s{seq, start, n, sample, -1};
  absl::Span<const int32_t> tokens;
  if (start + n <= known) {
    tokens = absl::MakeConstSpan(seq->tokens).subspan(start, n);
  } else {
    // Only the latest pending token can be an input: the steps before it are collected before
    // this one is planned (the engine keeps at most two chained steps in flight).
    LLM_CHECK(start + n == known + 1 && seq->pending_tokens == 1 && seq->pending_row >= 0);
    chunk_.assign(seq->tokens.begin() + start, seq->tokens.end());
    chunk_.push_back(-(seq->pending_row + 1));
    s.pending_input_index = plan.num_tokens() + n - 1;
    tokens = chunk_;
  }
  plan.AddSequence(tokens, start, seq->blocks.blocks(), options_.block_size, sample);
  seq->num_computed = start + n;
  ++seq->in_flight;
  if (sample) {
    ++seq->pending_tokens;
    seq->pending_row = static_cast<int32_t>(plan.logit_rows.size()) - 1;
  }
  scheduled.push_back(s);
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
  // Without chained steps, sequences in a launched step are neither scheduled again nor
  // preempted until it is collected.
  const uint64_t preemptions_before = preemptions_;
  std::vector<Sequence*> order;
  for (Sequence* seq : running_)
    if (Ready(seq)) order.push_back(seq);
  std::vector<std::pair<Sequence*, int32_t>> picked;
  size_t end = order.size();
  for (size_t i = 0; i < end && budget > 0 && static_cast<int32_t>(picked.size()) < max_seqs; ++i) {
    Sequence* seq = order[i];
    const int32_t n = std::min(seq->length() - seq->num_computed, budget);
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
    picked.emplace_back(seq, n);
    PublishFullBlocks(seq, seq->num_computed + n);
    budget -= n;
  }

  // A step that had to preempt admits nothing: the running sequences grew more than expected.
  const bool preempted = preemptions_ != preemptions_before;
  growth_ratio_ = preempted ? std::min(1.0, growth_ratio_ + 0.3) : std::max(kMinGrowthRatio, growth_ratio_ - kGrowthRatioDecay);

  // 2. Admit waiting sequences in order while there is room; stop at the first that does not fit
  //    (FCFS: a later, smaller request never overtakes an earlier one of the same priority).
  //    Room counts the expected growth of the running sequences (see growth_ratio_), unless none
  //    runs: the first sequence always starts when its prompt fits.
  int64_t reserved = 0;
  for (Sequence* seq : running_) reserved += GrowthReserve(seq);
  for (auto it = waiting_.begin(); !preempted && it != waiting_.end() && budget > 0 &&
                                   static_cast<int32_t>(picked.size()) < max_seqs;) {
    Sequence* seq = *it;
    if (!Ready(seq)) {  // preempted while a launched step holds it: it waits for that step
      ++it;
      continue;
    }
    const bool matched_here = seq->num_computed == 0 && seq->blocks.blocks().empty();
    MatchCachedPrefix(seq);
    // Not admitted after all: the cached blocks it took go back (still cached).
    auto unmatch = [&] {
      if (!matched_here) return;
      seq->blocks.Release(pool_);
      seq->num_computed = 0;
    };
    const int32_t n = std::min(seq->length() - seq->num_computed, budget);
    const int64_t prompt_blocks = KvBlockTable::BlocksFor(seq->length(), bs) - static_cast<int64_t>(seq->blocks.blocks().size());
    if (!running_.empty() && pool_.num_free() < prompt_blocks + reserved + GrowthReserve(seq)) {
      unmatch();
      break;
    }
    if (!seq->blocks.Reserve(seq->num_computed + n, bs, pool_)) {
      unmatch();
      break;
    }
    reserved += GrowthReserve(seq);
    it = waiting_.erase(it);
    running_.insert(seq);
    seq->running = true;
    if (matched_here && options_.prefix_caching) {
      prefix_queried_ += static_cast<uint64_t>(seq->length());
      prefix_hits_ += static_cast<uint64_t>(seq->num_computed);
      if (seq->cached_tokens < 0) seq->cached_tokens = std::min(seq->num_computed, seq->prompt_len);
    }
    picked.emplace_back(seq, n);
    // Published now, so that a request admitted after it in this same step can take the blocks
    // this one computes: within a step every layer writes all K/V before any attention reads.
    PublishFullBlocks(seq, seq->num_computed + n);
    budget -= n;
  }

  // Single-token sequences (decodes) first: attention runs them apart from the prefills
  // (StepMetadata::num_decode_seqs). The order within each group is kept.
  std::stable_partition(picked.begin(), picked.end(), [](const auto& p) { return p.second == 1; });
  for (const auto& [seq, n] : picked) Launch(seq, n, plan, scheduled);
  return !scheduled.empty();
}

SchedulerStats Scheduler::stats() const {
  SchedulerStats s;
  s.running = static_cast<int32_t>(running_.size());
  s.waiting = static_cast<int32_t>(waiting_.size());
  s.kv_blocks_used = pool_.num_used();
  s.kv_blocks_total = pool_.num_blocks();
  s.preemptions = preemptions_;
  s.prefix_cache_queried_tokens = prefix_queried_;
  s.prefix_cache_hit_tokens = prefix_hits_;
  s.prefix_cache_blocks = pool_.stats().cached_blocks;
  s.prefix_cache_evictions = pool_.stats().evictions;
  return s;
}

std::vector<Sequence*> Scheduler::AllSequences() const {
  std::vector<Sequence*> all(running_.begin(), running_.end());
  all.insert(all.end(), waiting_.begin(), waiting_.end());
  return all;
}

}  // namespace llm
