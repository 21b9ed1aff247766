#include "engine/engine_core.h"

#include <algorithm>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "engine/scheduler/stop_checker.h"
#include "engine/tokenizer/tokenizer.h"

namespace llm {
namespace {

double Ms(absl::Duration d) { return absl::ToDoubleMilliseconds(d); }
double Seconds(absl::Duration d) { return absl::ToDoubleSeconds(d); }

// How often a core without workers looks again (their return, deadlines, cancels): small against
// a restart's seconds, large enough to cost nothing.
constexpr absl::Duration kSuspendedPoll = absl::Milliseconds(20);

SchedulerOptions ForExecutor(SchedulerOptions options, const StepExecutor& executor, bool overlap) {
  // (prefix_caching comes with the options as given)
  options.chain_steps = overlap && executor.chains_steps();
  options.micro_batches = executor.chains_steps() ? 1 : std::max(1, executor.max_in_flight());
  return options;
}

}  // namespace

// The engine thread's loop.
//
// Each iteration: take new requests and stop requests (cancel, stop strings, deadlines); launch
// steps while fewer than the executor allows are in flight (two with overlapped steps: the next
// step is planned and launched while the device runs the current one, its sequences' pending
// tokens named by placeholders); collect the oldest step (appending its tokens, checking EOS,
// stop ids and max_tokens) and hand its events to the streamer's output threads. Without workers
// (a loss) it only takes requests and stops, every kSuspendedPoll.
EngineCore::EngineCore(int index, const EngineInfo& info, const EngineOptions& options,
                       std::unique_ptr<StepExecutor> executor, std::shared_ptr<const Tokenizer> tokenizer,
                       EngineStepMetrics* metrics)
    : index_(index),
      info_(info),
      options_(options),
      metrics_(metrics),
      executor_(std::move(executor)),
      scheduler_(ForExecutor(options.scheduler, *executor_, options.overlap_steps)) {
  eos_ids_ = info_.config.eos_token_ids;
  if (tokenizer)
    for (int32_t id : tokenizer->eos_token_ids())
      if (std::find(eos_ids_.begin(), eos_ids_.end(), id) == eos_ids_.end()) eos_ids_.push_back(id);
  // Chained steps keep exactly two in flight: a placeholder then always names the step launched
  // just before (Scheduler::Launch).
  max_in_flight_ = executor_->chains_steps() ? (options_.overlap_steps ? 2 : 1) : std::max(1, executor_->max_in_flight());
  plan_.block_table_width = options.scheduler.block_table_width;
  streamer_ = std::make_unique<RequestStreamer>(
      std::move(tokenizer), std::max(1, options.output_threads), /*max_batches=*/64,
      [this](RequestId id, FinishReason reason, absl::Status status) { Stop(id, reason, std::move(status)); },
      &metrics_->output_seconds);
  stats_.scheduler = scheduler_.stats();
  thread_ = std::thread([this] { Loop(); });
}

absl::Status EngineCore::Enqueue(std::unique_ptr<Sequence> seq, StreamedRequest streamed) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!accepting_) return absl::UnavailableError("the server is shutting down");
  if (!gone_.ok()) return gone_;
  if (queued_ >= options_.max_queue)
    return absl::ResourceExhaustedError(absl::StrCat("the request queue is full (", options_.max_queue, " waiting)"));
  // Known to its output thread before the engine thread can emit anything for it.
  streamer_->Register(std::move(streamed));
  ++queued_;
  inbox_.push_back(std::move(seq));
  cv_.notify_one();
  return absl::OkStatus();
}

void EngineCore::Stop(RequestId id, FinishReason reason, absl::Status status) {
  std::lock_guard<std::mutex> lock(mu_);
  stops_.push_back({id, reason, std::move(status)});
  cv_.notify_one();
}

void EngineCore::Shutdown(bool drain) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    accepting_ = false;
    stop_ = true;
    drain_ = drain_ || drain;
    if (joined_) return;
    joined_ = true;
  }
  cv_.notify_one();
  if (thread_.joinable()) thread_.join();
  streamer_->Stop();  // every final output delivered
}

EngineStats EngineCore::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  EngineStats s = stats_;
  s.replicas = 1;
  s.replicas_serving = executor_->available() ? 1 : 0;
  return s;
}

int64_t EngineCore::load() const {
  std::lock_guard<std::mutex> lock(mu_);
  return int64_t{queued_} + stats_.scheduler.running;
}

void EngineCore::TakeInbox() {
  std::vector<std::unique_ptr<Sequence>> incoming;
  std::vector<StopOrder> stops;
  {
    std::lock_guard<std::mutex> lock(mu_);
    incoming.swap(inbox_);
    stops.swap(stops_);
  }
  for (auto& seq : incoming) {
    seq->arrival_order = arrival_counter_++;
    Sequence* raw = seq.get();
    sequences_[raw->id] = std::move(seq);
    scheduler_.AddWaiting(raw);
  }
  for (StopOrder& s : stops) {
    auto it = sequences_.find(s.id);
    if (it != sequences_.end()) Finish(it->second.get(), s.reason, std::move(s.status));
  }
  const absl::Time now = absl::Now();
  for (Sequence* seq : scheduler_.AllSequences())
    if (now > seq->request.deadline) Finish(seq, FinishReason::kDeadline);
}

void EngineCore::Loop() {
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      const auto woken = [&] {
        return stop_ || !inbox_.empty() || !stops_.empty() || !in_flight_.empty() ||
               (!scheduler_.empty() && executor_->available());
      };
      if (!scheduler_.empty() && !executor_->available()) {
        // Waiting for new workers: deadlines and cancels still apply, and the executor may give up.
        cv_.wait_for(lock, absl::ToChronoNanoseconds(kSuspendedPoll), woken);
      } else {
        cv_.wait(lock, woken);
      }
    }
    TakeInbox();
    bool stopping, drain;
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping = stop_;
      drain = drain_;
    }
    if (stopping && !drain) {
      std::vector<Sequence*> all = scheduler_.AllSequences();
      for (Sequence* seq : all) Finish(seq, FinishReason::kCancelled);
    }
    if (absl::Status health = executor_->health(); !health.ok()) FailForGood(health);
    if (stopping && scheduler_.empty()) {
      while (!in_flight_.empty() && executor_->available()) CollectStep();  // results of finished requests, dropped
      in_flight_.clear();
      streamer_->Flush();
      PublishStats();
      break;
    }
    if (executor_->available()) LaunchSteps();
    if (!in_flight_.empty()) CollectStep();
    streamer_->Flush();
    PublishStats();
  }
}

void EngineCore::PublishStats() {
  std::lock_guard<std::mutex> lock(mu_);
  stats_.scheduler = scheduler_.stats();
  queued_ = static_cast<int32_t>(inbox_.size()) + stats_.scheduler.waiting;
}

void EngineCore::LaunchSteps() {
  while (static_cast<int>(in_flight_.size()) < max_in_flight_) {
    const absl::Time t0 = absl::Now();
    if (!scheduler_.Schedule(plan_, scheduled_)) return;
    rows_.clear();
    InFlightStep step;
    if (!spare_steps_.empty()) {
      step = std::move(spare_steps_.back());
      spare_steps_.pop_back();
    }
    step.launched.clear();
    step.sampled.clear();
    step.prompt_tokens = 0;
    for (const ScheduledSequence& s : scheduled_) {
      Sequence* seq = s.seq;
      if (seq->first_scheduled == absl::InfinitePast()) seq->first_scheduled = t0;
      if (s.start < seq->prompt_len) step.prompt_tokens += std::min(s.num_tokens, seq->prompt_len - s.start);
      step.launched.push_back(seq->id);
      if (!s.sample) continue;
      // The token sampled here is generated token number scheduled_completion_tokens() - 1 (the
      // scheduler counted it pending already): its draw depends on that alone.
      const absl::Span<const int32_t> tokens = seq->tokens;
      rows_.push_back({&seq->request.sampling, static_cast<uint64_t>(seq->scheduled_completion_tokens() - 1),
                       tokens.first(seq->prompt_len), tokens.subspan(seq->prompt_len), s.pending_input_index,
                       seq->request.logit_bias});
      step.sampled.push_back(seq->id);
    }
    const absl::Time t1 = absl::Now();
    metrics_->schedule_seconds.Observe(Seconds(t1 - t0));
    metrics_->sequences.Observe(plan_.num_seqs());
    metrics_->tokens.Observe(plan_.num_tokens());
    in_flight_.push_back(std::move(step));
    const absl::Status status = executor_->Launch(plan_, rows_);
    metrics_->launch_seconds.Observe(Seconds(absl::Now() - t1));
    if (!status.ok()) {
      OnStepFailure(status);
      return;
    }
  }
}

void EngineCore::CollectStep() {
  InFlightStep step = std::move(in_flight_.front());
  in_flight_.pop_front();
  results_.resize(step.sampled.size());
  const absl::Time t0 = absl::Now();
  StepDeviceTiming timing;
  const absl::Status status = executor_->Collect(absl::MakeSpan(results_), &timing);
  const absl::Time t1 = absl::Now();
  metrics_->wait_seconds.Observe(Seconds(t1 - t0));
  if (!status.ok()) {
    OnStepFailure(status);
    return;
  }
  if (timing.valid) metrics_->device_seconds.Observe(timing.device_ms / 1e3);
  for (RequestId id : step.launched) {
    auto it = sequences_.find(id);
    if (it != sequences_.end()) --it->second->in_flight;
  }
  uint64_t generated = 0;
  for (size_t i = 0; i < step.sampled.size(); ++i) {
    auto it = sequences_.find(step.sampled[i]);
    if (it == sequences_.end()) continue;  // finished while in flight: its token is dropped
    Sequence* seq = it->second.get();
    const SampleResult& result = results_[i];
    seq->tokens.push_back(result.token);
    --seq->pending_tokens;
    ++generated;
    if (seq->first_token == absl::InfinitePast()) seq->first_token = t1;
    streamer_->AddToken(seq->id, result, seq->request.sampling.num_top_logprobs > 0);
    const FinishReason reason = TokenStopReason(seq->request.stop, eos_ids_, result.token, seq->completion_tokens());
    if (reason != FinishReason::kNone) Finish(seq, reason);
  }
  if (suspended_ && generated > 0) {
    suspended_ = false;
    const double recovery = Seconds(t1 - lost_at_);
    metrics_->recovery_seconds.Observe(recovery);
    std::fprintf(stderr, "engine: replica %d: first token %.3f s after its workers were lost\n", index_, recovery);
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.steps;
    stats_.generated_tokens += generated;
    stats_.prompt_tokens += step.prompt_tokens;
    if (timing.valid) {
      stats_.device_busy_seconds += timing.device_ms / 1e3;
      stats_.device_idle_seconds += timing.idle_ms / 1e3;
    }
  }
  if (spare_steps_.size() < 4) spare_steps_.push_back(std::move(step));
  metrics_->collect_seconds.Observe(Seconds(absl::Now() - t1));
}

void EngineCore::Finish(Sequence* seq, FinishReason reason, absl::Status status) {
  // Blocks go back to the pool, and the published stats say so, before the final output can
  // reach the client: whoever saw every request end sees an empty cache. A step still in flight
  // may write the blocks: every later step that reuses them runs after it.
  scheduler_.Remove(seq);
  {
    std::lock_guard<std::mutex> lock(mu_);
    stats_.scheduler = scheduler_.stats();
  }
  FinishedRequest f;
  f.reason = reason;
  f.status = std::move(status);
  f.preemptions = seq->preemptions;
  f.cached_prompt_tokens = std::max(0, seq->cached_tokens);
  const absl::Time now = absl::Now();
  if (seq->first_scheduled != absl::InfinitePast()) f.timings.queue_ms = Ms(seq->first_scheduled - seq->arrival);
  if (seq->first_token != absl::InfinitePast()) {
    f.timings.ttft_ms = Ms(seq->first_token - seq->arrival);
    f.timings.decode_ms = Ms(now - seq->first_token);
  }
  f.timings.total_ms = Ms(now - seq->arrival);
  streamer_->AddFinished(seq->id, std::move(f));
  sequences_.erase(seq->id);
}

void EngineCore::OnStepFailure(const absl::Status& status) {
  if (executor_->recovers() && absl::IsUnavailable(status) && executor_->health().ok()) {
    Suspend(status);
  } else {
    AbortAll(status);
  }
}

void EngineCore::Suspend(const absl::Status& why) {
  // What the lost workers had (KV cache, launched steps) is gone; every request stays, with the
  // tokens it has, and is recomputed on the new workers.
  in_flight_.clear();
  scheduler_.ResetDeviceState();
  if (!suspended_) lost_at_ = absl::Now();
  suspended_ = true;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.recoveries;
  }
  std::fprintf(stderr, "engine: replica %d: its workers were lost (%s); %zu requests wait for new ones\n", index_,
               std::string(why.message()).c_str(), sequences_.size());
}

void EngineCore::FailForGood(const absl::Status& health) {
  const absl::Status gone = absl::UnavailableError(health.message());
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (gone_.ok()) {
      gone_ = gone;
      std::fprintf(stderr, "engine: replica %d will not serve again: %s\n", index_, std::string(health.message()).c_str());
    }
  }
  for (Sequence* seq : scheduler_.AllSequences()) Finish(seq, FinishReason::kError, gone);
  in_flight_.clear();
}

void EngineCore::AbortAll(const absl::Status& status) {
  // The executor's state is unknown after a failure: every request fails rather than waits.
  const absl::Status error(status.code(), absl::StrCat("step failed: ", status.message()));
  for (Sequence* seq : scheduler_.AllSequences()) Finish(seq, FinishReason::kError, error);
  in_flight_.clear();
  scheduler_.DropPrefixCache();  // what the failed steps wrote is unknown
}

}  // namespace llm
