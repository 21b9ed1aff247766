#include "engine/engine.h"

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <random>
#include <thread>
#include <unordered_map>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/output/request_streamer.h"
#include "engine/runtime/step_executor.h"
#include "engine/scheduler/scheduler.h"
#include "engine/scheduler/stop_checker.h"
#include "engine/tokenizer/tokenizer.h"

namespace llm {

std::string_view FinishReasonName(FinishReason reason) {
  switch (reason) {
    case FinishReason::kNone: return "none";
    case FinishReason::kLength: return "length";
    case FinishReason::kStop: return "stop";
    case FinishReason::kEos: return "eos";
    case FinishReason::kCancelled: return "cancelled";
    case FinishReason::kDeadline: return "deadline";
    case FinishReason::kError: return "error";
  }
  return "unknown";
}

namespace {
double Ms(absl::Duration d) { return absl::ToDoubleMilliseconds(d); }
double Seconds(absl::Duration d) { return absl::ToDoubleSeconds(d); }
}  // namespace

// The engine thread's loop, with the state only it touches below the line in the members.
//
// Each iteration: take new requests and stop requests (cancel, stop strings, deadlines); launch
// steps while fewer than the executor allows are in flight (two with overlapped steps: the next
// step is planned and launched while the device runs the current one, its sequences' pending
// tokens named by placeholders); collect the oldest step (appending its tokens, checking EOS,
// stop ids and max_tokens) and hand its events to the streamer's output threads.
class Engine::Impl {
 public:
  Impl(const EngineInfo& info, const EngineOptions& options, std::unique_ptr<StepExecutor> executor,
       std::shared_ptr<const Tokenizer> tokenizer);
  ~Impl() { Shutdown(false); }

  absl::Status Validate(const GenerateRequest& request) const;
  absl::StatusOr<RequestId> Submit(GenerateRequest request, OutputCallback callback);
  void Stop(RequestId id, FinishReason reason, absl::Status status);
  void Shutdown(bool drain);
  EngineStats stats() const {
    std::lock_guard<std::mutex> lock(mu_);
    return stats_;
  }

  const EngineInfo info_;
  const EngineOptions options_;
  std::shared_ptr<const Tokenizer> tokenizer_;
  EngineStepMetrics metrics_;

 private:
  // A request the engine thread must finish at its next iteration.
  struct StopOrder {
    RequestId id;
    FinishReason reason;
    absl::Status status;
  };
  // A launched step whose tokens have not come back. Sequences are named by id: one may finish
  // (EOS in the step before, cancel, deadline, stop string) while its step is in flight, and its
  // result is then dropped.
  struct InFlightStep {
    std::vector<RequestId> launched;  // every sequence of the step
    std::vector<RequestId> sampled;   // one per result row
    uint64_t prompt_tokens = 0;
  };

  void Loop();
  void TakeInbox();
  void LaunchSteps();
  void CollectStep();
  void Finish(Sequence* seq, FinishReason reason, absl::Status status = absl::OkStatus());
  void AbortAll(const absl::Status& status);
  void PublishStats();

  std::unique_ptr<StepExecutor> executor_;
  std::vector<int32_t> eos_ids_;
  int max_in_flight_ = 1;
  std::unique_ptr<RequestStreamer> streamer_;

  // Shared with callers, under mu_.
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::unique_ptr<Sequence>> inbox_;
  std::vector<StopOrder> stops_;
  int32_t queued_ = 0;  // inbox + waiting, for the queue limit
  bool accepting_ = true;
  bool stop_ = false;
  bool drain_ = false;
  bool joined_ = false;
  RequestId next_id_ = 1;
  EngineStats stats_;

  // Engine thread only.
  Scheduler scheduler_;
  std::unordered_map<RequestId, std::unique_ptr<Sequence>> sequences_;
  uint64_t arrival_counter_ = 0;
  StepPlan plan_;
  std::vector<ScheduledSequence> scheduled_;
  std::vector<SampleRow> rows_;
  std::vector<SampleResult> results_;
  std::deque<InFlightStep> in_flight_;
  std::vector<InFlightStep> spare_steps_;  // reused: no allocation per step
  std::thread thread_;
};

namespace {
SchedulerOptions ForExecutor(SchedulerOptions options, const StepExecutor& executor, bool overlap) {
  // (prefix_caching comes with the options as given)
  options.chain_steps = overlap && executor.chains_steps();
  options.micro_batches = executor.chains_steps() ? 1 : std::max(1, executor.max_in_flight());
  return options;
}
}  // namespace

Engine::Impl::Impl(const EngineInfo& info, const EngineOptions& options, std::unique_ptr<StepExecutor> executor,
                   std::shared_ptr<const Tokenizer> tokenizer)
    : info_(info),
      options_(options),
      tokenizer_(std::move(tokenizer)),
      executor_(std::move(executor)),
      scheduler_(ForExecutor(options.scheduler, *executor_, options.overlap_steps)) {
  eos_ids_ = info_.config.eos_token_ids;
  if (tokenizer_)
    for (int32_t id : tokenizer_->eos_token_ids())
      if (std::find(eos_ids_.begin(), eos_ids_.end(), id) == eos_ids_.end()) eos_ids_.push_back(id);
  // Chained steps keep exactly two in flight: a placeholder then always names the step launched
  // just before (Scheduler::Launch).
  max_in_flight_ = executor_->chains_steps() ? (options_.overlap_steps ? 2 : 1) : std::max(1, executor_->max_in_flight());
  plan_.block_table_width = options.scheduler.block_table_width;
  streamer_ = std::make_unique<RequestStreamer>(
      tokenizer_, std::max(1, options.output_threads), /*max_batches=*/64,
      [this](RequestId id, FinishReason reason, absl::Status status) { Stop(id, reason, std::move(status)); },
      &metrics_.output_seconds);
  stats_.scheduler = scheduler_.stats();
  thread_ = std::thread([this] { Loop(); });
}

absl::Status Engine::Impl::Validate(const GenerateRequest& r) const {
  auto bad = [](auto&&... parts) { return absl::InvalidArgumentError(absl::StrCat(parts...)); };
  const int64_t vocab = info_.config.vocab_size;
  if (r.prompt_tokens.empty()) return bad("the prompt is empty");
  for (int32_t t : r.prompt_tokens)
    if (t < 0 || t >= vocab) return bad("prompt token id ", t, " is outside the vocabulary [0, ", vocab, ")");
  const StopCriteria& st = r.stop;
  if (st.max_tokens < 1) return bad("max_tokens must be at least 1, got ", st.max_tokens);
  if (st.min_tokens < 0 || st.min_tokens > st.max_tokens)
    return bad("min_tokens must be in [0, max_tokens], got ", st.min_tokens);
  const int64_t total = static_cast<int64_t>(r.prompt_tokens.size()) + st.max_tokens;
  if (total > options_.max_context)
    return bad("prompt (", r.prompt_tokens.size(), " tokens) + max_tokens (", st.max_tokens,
               ") exceeds the context length ", options_.max_context);
  for (int32_t t : st.stop_token_ids)
    if (t < 0 || t >= vocab) return bad("stop token id ", t, " is outside the vocabulary");
  for (const std::string& s : st.stop_strings)
    if (s.empty()) return bad("stop strings must not be empty");
  if (!st.stop_strings.empty() && !tokenizer_) return bad("stop strings need a tokenizer, and this model has none");
  if (r.detokenize && !tokenizer_) return bad("text output needs a tokenizer, and this model has none");
  const SamplingParams& p = r.sampling;
  if (!(p.temperature >= 0.0f) || !std::isfinite(p.temperature)) return bad("temperature must be >= 0, got ", p.temperature);
  if (!(p.top_p > 0.0f && p.top_p <= 1.0f)) return bad("top_p must be in (0, 1], got ", p.top_p);
  if (!(p.min_p >= 0.0f && p.min_p <= 1.0f)) return bad("min_p must be in [0, 1], got ", p.min_p);
  if (p.top_k < 0) return bad("top_k must be >= 0 (0 disables it), got ", p.top_k);
  if (!(p.repetition_penalty > 0.0f) || !std::isfinite(p.repetition_penalty))
    return bad("repetition_penalty must be > 0, got ", p.repetition_penalty);
  if (!(std::fabs(p.presence_penalty) <= 2.0f)) return bad("presence_penalty must be in [-2, 2], got ", p.presence_penalty);
  if (!(std::fabs(p.frequency_penalty) <= 2.0f))
    return bad("frequency_penalty must be in [-2, 2], got ", p.frequency_penalty);
  if (p.num_top_logprobs < 0 || p.num_top_logprobs > kMaxTopLogprobs)
    return bad("top logprobs must be in [0, ", kMaxTopLogprobs, "], got ", p.num_top_logprobs);
  return absl::OkStatus();
}

absl::StatusOr<RequestId> Engine::Impl::Submit(GenerateRequest request, OutputCallback callback) {
  RETURN_IF_ERROR(Validate(request));
  auto seq = std::make_unique<Sequence>();
  if (!request.has_seed) {
    thread_local std::mt19937_64 rng{std::random_device{}()};
    request.sampling.seed = rng();
  }
  seq->arrival = absl::Now();
  seq->tokens = request.prompt_tokens;
  seq->prompt_len = static_cast<int32_t>(request.prompt_tokens.size());
  seq->salt_hash = SaltHash(request.cache_salt);
  StreamedRequest streamed;
  streamed.callback = std::move(callback);
  streamed.stop = request.stop;
  streamed.prompt_tokens = request.prompt_tokens;
  streamed.detokenize = tokenizer_ != nullptr && request.detokenize;
  streamed.num_top_logprobs = request.sampling.num_top_logprobs;
  seq->request = std::move(request);
  std::lock_guard<std::mutex> lock(mu_);
  if (!accepting_) return absl::UnavailableError("the server is shutting down");
  if (queued_ >= options_.max_queue)
    return absl::ResourceExhaustedError(absl::StrCat("the request queue is full (", options_.max_queue, " waiting)"));
  seq->id = next_id_++;
  streamed.id = seq->id;
  const RequestId id = seq->id;
  // Known to its output thread before the engine thread can emit anything for it.
  streamer_->Register(std::move(streamed));
  ++queued_;
  inbox_.push_back(std::move(seq));
  cv_.notify_one();
  return id;
}

void Engine::Impl::Stop(RequestId id, FinishReason reason, absl::Status status) {
  std::lock_guard<std::mutex> lock(mu_);
  stops_.push_back({id, reason, std::move(status)});
  cv_.notify_one();
}

void Engine::Impl::Shutdown(bool drain) {
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

void Engine::Impl::TakeInbox() {
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

void Engine::Impl::Loop() {
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] {
        return stop_ || !inbox_.empty() || !stops_.empty() || !scheduler_.empty() || !in_flight_.empty();
      });
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
    if (stopping && scheduler_.empty()) {
      while (!in_flight_.empty()) CollectStep();  // results of finished requests, dropped
      streamer_->Flush();
      PublishStats();
      break;
    }
    LaunchSteps();
    if (!in_flight_.empty()) CollectStep();
    streamer_->Flush();
    PublishStats();
  }
}

void Engine::Impl::PublishStats() {
  std::lock_guard<std::mutex> lock(mu_);
  stats_.scheduler = scheduler_.stats();
  queued_ = static_cast<int32_t>(inbox_.size()) + stats_.scheduler.waiting;
}

void Engine::Impl::LaunchSteps() {
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
                       tokens.first(seq->prompt_len), tokens.subspan(seq->prompt_len), s.pending_input_index});
      step.sampled.push_back(seq->id);
    }
    const absl::Time t1 = absl::Now();
    metrics_.schedule_seconds.Observe(Seconds(t1 - t0));
    metrics_.sequences.Observe(plan_.num_seqs());
    metrics_.tokens.Observe(plan_.num_tokens());
    in_flight_.push_back(std::move(step));
    const absl::Status status = executor_->Launch(plan_, rows_);
    metrics_.launch_seconds.Observe(Seconds(absl::Now() - t1));
    if (!status.ok()) {
      AbortAll(status);
      return;
    }
  }
}

void Engine::Impl::CollectStep() {
  InFlightStep step = std::move(in_flight_.front());
  in_flight_.pop_front();
  results_.resize(step.sampled.size());
  const absl::Time t0 = absl::Now();
  StepDeviceTiming timing;
  const absl::Status status = executor_->Collect(absl::MakeSpan(results_), &timing);
  const absl::Time t1 = absl::Now();
  metrics_.wait_seconds.Observe(Seconds(t1 - t0));
  if (!status.ok()) {
    AbortAll(status);
    return;
  }
  if (timing.valid) metrics_.device_seconds.Observe(timing.device_ms / 1e3);
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
  metrics_.collect_seconds.Observe(Seconds(absl::Now() - t1));
}

void Engine::Impl::Finish(Sequence* seq, FinishReason reason, absl::Status status) {
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

void Engine::Impl::AbortAll(const absl::Status& status) {
  // The executor's state is unknown after a failure: every request fails rather than waits.
  const absl::Status error(status.code(), absl::StrCat("step failed: ", status.message()));
  for (Sequence* seq : scheduler_.AllSequences()) Finish(seq, FinishReason::kError, error);
  in_flight_.clear();
  scheduler_.DropPrefixCache();  // what the failed steps wrote is unknown
}

// --- the façade ---

absl::StatusOr<std::unique_ptr<Engine>> Engine::Create(const EngineInfo& info, const EngineOptions& options,
                                                       std::unique_ptr<StepExecutor> executor,
                                                       std::shared_ptr<const Tokenizer> tokenizer) {
  if (!executor) return absl::InvalidArgumentError("engine needs a step executor");
  const SchedulerOptions& s = options.scheduler;
  if (s.num_blocks <= 0 || s.block_size <= 0 || s.block_table_width <= 0 || s.max_seqs <= 0 ||
      s.max_tokens_per_step <= 0 || options.max_context <= 0)
    return absl::InvalidArgumentError("engine options incomplete (KV blocks, limits and context must be set)");
  return std::unique_ptr<Engine>(
      new Engine(std::make_unique<Impl>(info, options, std::move(executor), std::move(tokenizer))));
}

Engine::Engine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Engine::~Engine() { Shutdown(false); }

absl::StatusOr<RequestId> Engine::Submit(GenerateRequest request, OutputCallback callback) {
  return impl_->Submit(std::move(request), std::move(callback));
}
void Engine::Cancel(RequestId id) { impl_->Stop(id, FinishReason::kCancelled, absl::OkStatus()); }
void Engine::Shutdown(bool drain) { impl_->Shutdown(drain); }
const EngineInfo& Engine::info() const { return impl_->info_; }
EngineStats Engine::stats() const { return impl_->stats(); }
const EngineStepMetrics& Engine::step_metrics() const { return impl_->metrics_; }
const Tokenizer* Engine::tokenizer() const { return impl_->tokenizer_.get(); }
absl::Status Engine::Validate(const GenerateRequest& request) const { return impl_->Validate(request); }

}  // namespace llm
