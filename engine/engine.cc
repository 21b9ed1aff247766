#include "engine/engine.h"

#include <algorithm>
#include <cmath>
#include <random>

#include "absl/strings/str_cat.h"

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

SchedulerOptions WithMicroBatches(SchedulerOptions options, int micro_batches) {
  options.micro_batches = std::max(1, micro_batches);
  return options;
}
}  // namespace

absl::StatusOr<std::unique_ptr<Engine>> Engine::Create(const EngineInfo& info, const EngineOptions& options,
                                                       std::unique_ptr<StepExecutor> executor,
                                                       std::shared_ptr<const Tokenizer> tokenizer) {
  if (!executor) return absl::InvalidArgumentError("engine needs a step executor");
  const SchedulerOptions& s = options.scheduler;
  if (s.num_blocks <= 0 || s.block_size <= 0 || s.block_table_width <= 0 || s.max_seqs <= 0 ||
      s.max_tokens_per_step <= 0 || options.max_context <= 0)
    return absl::InvalidArgumentError("engine options incomplete (KV blocks, limits and context must be set)");
  return std::unique_ptr<Engine>(new Engine(info, options, std::move(executor), std::move(tokenizer)));
}

Engine::Engine(const EngineInfo& info, const EngineOptions& options, std::unique_ptr<StepExecutor> executor,
               std::shared_ptr<const Tokenizer> tokenizer)
    : info_(info), options_(options), executor_(std::move(executor)), tokenizer_(std::move(tokenizer)),
      scheduler_(WithMicroBatches(options.scheduler, executor_->max_in_flight())) {
  eos_ids_ = info_.config.eos_token_ids;
  if (tokenizer_)
    for (int32_t id : tokenizer_->eos_token_ids())
      if (std::find(eos_ids_.begin(), eos_ids_.end(), id) == eos_ids_.end()) eos_ids_.push_back(id);
  plan_.block_table_width = options.scheduler.block_table_width;
  thread_ = std::thread([this] { Loop(); });
}

Engine::~Engine() { Shutdown(false); }

absl::Status Engine::Validate(const GenerateRequest& r) const {
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

absl::StatusOr<RequestId> Engine::Submit(GenerateRequest request, OutputCallback callback) {
  RETURN_IF_ERROR(Validate(request));
  auto seq = std::make_unique<Sequence>();
  if (!request.has_seed) {
    thread_local std::mt19937_64 rng{std::random_device{}()};
    request.sampling.seed = rng();
  }
  seq->arrival = absl::Now();
  seq->tokens = request.prompt_tokens;
  seq->prompt_len = static_cast<int32_t>(request.prompt_tokens.size());
  seq->callback = std::move(callback);
  seq->request = std::move(request);
  seq->stop = std::make_unique<StopChecker>(seq->request.stop, eos_ids_);
  if (tokenizer_ && seq->request.detokenize) {
    seq->detokenizer = std::make_unique<IncrementalDetokenizer>(*tokenizer_, /*skip_special_tokens=*/true);
    seq->detokenizer->SetPrefix(seq->request.prompt_tokens);
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (!accepting_) return absl::UnavailableError("the server is shutting down");
  if (queued_ >= options_.max_queue)
    return absl::ResourceExhaustedError(absl::StrCat("the request queue is full (", options_.max_queue, " waiting)"));
  seq->id = next_id_++;
  const RequestId id = seq->id;
  ++queued_;
  inbox_.push_back(std::move(seq));
  cv_.notify_one();
  return id;
}

void Engine::Cancel(RequestId id) {
  std::lock_guard<std::mutex> lock(mu_);
  cancels_.push_back(id);
  cv_.notify_one();
}

void Engine::Shutdown(bool drain) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    accepting_ = false;
    stop_ = true;
    drain_ = drain_ || drain;
  }
  cv_.notify_one();
  if (thread_.joinable()) thread_.join();
}

EngineStats Engine::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void Engine::TakeInbox() {
  std::vector<std::unique_ptr<Sequence>> incoming;
  std::vector<RequestId> cancels;
  {
    std::lock_guard<std::mutex> lock(mu_);
    incoming.swap(inbox_);
    cancels.swap(cancels_);
  }
  for (auto& seq : incoming) {
    seq->arrival_order = arrival_counter_++;
    Sequence* raw = seq.get();
    sequences_[raw->id] = std::move(seq);
    scheduler_.AddWaiting(raw);
  }
  for (RequestId id : cancels) {
    auto it = sequences_.find(id);
    if (it != sequences_.end()) Finish(it->second.get(), FinishReason::kCancelled);
  }
  const absl::Time now = absl::Now();
  for (Sequence* seq : scheduler_.AllSequences())
    if (now > seq->request.deadline) Finish(seq, FinishReason::kDeadline);
}

void Engine::Loop() {
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] {
        return stop_ || !inbox_.empty() || !cancels_.empty() || !scheduler_.empty() || !in_flight_.empty();
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
      break;
    }
    if (!scheduler_.empty() || !in_flight_.empty()) Step();
    std::lock_guard<std::mutex> lock(mu_);
    stats_.scheduler = scheduler_.stats();
    queued_ = static_cast<int32_t>(inbox_.size()) + stats_.scheduler.waiting;
  }
}

void Engine::Step() {
  LaunchSteps();
  if (!in_flight_.empty()) CollectStep();
}

void Engine::LaunchSteps() {
  while (static_cast<int>(in_flight_.size()) < executor_->max_in_flight()) {
    if (!scheduler_.Schedule(plan_, scheduled_)) return;
    rows_.clear();
    InFlightStep step;
    const absl::Time now = absl::Now();
    for (const ScheduledSequence& s : scheduled_) {
      Sequence* seq = s.seq;
      if (seq->first_scheduled == absl::InfinitePast()) seq->first_scheduled = now;
      if (seq->num_computed < seq->prompt_len)
        step.prompt_tokens += std::min(s.num_tokens, seq->prompt_len - seq->num_computed);
      seq->in_flight = true;
      step.advanced.emplace_back(seq->id, s.num_tokens);
      if (!s.sample) continue;
      rows_.push_back({&seq->request.sampling, static_cast<uint64_t>(seq->completion_tokens()),
                       absl::MakeConstSpan(seq->tokens).first(seq->prompt_len),
                       absl::MakeConstSpan(seq->tokens).subspan(seq->prompt_len)});
      step.sampled.push_back(seq->id);
    }
    in_flight_.push_back(std::move(step));
    const absl::Status status = executor_->Launch(plan_, rows_);
    if (!status.ok()) {
      AbortAll(status);
      return;
    }
  }
}

void Engine::CollectStep() {
  InFlightStep step = std::move(in_flight_.front());
  in_flight_.pop_front();
  results_.resize(step.sampled.size());
  const absl::Status status = executor_->Collect(absl::MakeSpan(results_));
  if (!status.ok()) {
    AbortAll(status);
    return;
  }
  for (const auto& [id, n] : step.advanced) {
    auto it = sequences_.find(id);
    if (it == sequences_.end()) continue;  // finished while in flight
    it->second->num_computed += n;
    it->second->in_flight = false;
  }
  const absl::Time done = absl::Now();
  for (size_t i = 0; i < step.sampled.size(); ++i) {
    auto it = sequences_.find(step.sampled[i]);
    if (it == sequences_.end()) continue;
    Sequence* seq = it->second.get();
    const int32_t token = results_[i].token;
    seq->tokens.push_back(token);
    if (seq->first_token == absl::InfinitePast()) seq->first_token = done;
    seq->unsent_tokens.push_back(token);
    if (seq->request.sampling.num_top_logprobs > 0) seq->unsent_logprobs.push_back(results_[i]);
    std::string delta;
    if (seq->detokenizer) {
      auto text = seq->detokenizer->Append(token);
      if (!text.ok()) {
        Finish(seq, FinishReason::kError, text.status());
        continue;
      }
      delta = std::move(*text);
    }
    const FinishReason reason = seq->stop->OnToken(token, seq->completion_tokens(), delta);
    if (reason != FinishReason::kNone)
      Finish(seq, reason);
    else
      Emit(seq, false, FinishReason::kNone, absl::OkStatus());
  }
  std::lock_guard<std::mutex> lock(mu_);
  ++stats_.steps;
  stats_.generated_tokens += step.sampled.size();
  stats_.prompt_tokens += step.prompt_tokens;
}

void Engine::Emit(Sequence* seq, bool finished, FinishReason reason, const absl::Status& status) {
  RequestOutput out;
  out.id = seq->id;
  out.token_ids.swap(seq->unsent_tokens);
  out.logprobs.swap(seq->unsent_logprobs);
  out.text = seq->stop->TakeText(finished);
  out.finished = finished;
  out.finish_reason = reason;
  out.status = status;
  out.prompt_tokens = seq->prompt_len;
  out.completion_tokens = seq->completion_tokens();
  out.preemptions = seq->preemptions;
  if (finished) {
    const absl::Time now = absl::Now();
    if (seq->first_scheduled != absl::InfinitePast()) out.timings.queue_ms = Ms(seq->first_scheduled - seq->arrival);
    if (seq->first_token != absl::InfinitePast()) {
      out.timings.ttft_ms = Ms(seq->first_token - seq->arrival);
      out.timings.decode_ms = Ms(now - seq->first_token);
    }
    out.timings.total_ms = Ms(now - seq->arrival);
  }
  if (!finished && out.token_ids.empty() && out.text.empty()) return;
  if (seq->callback) seq->callback(std::move(out));
}

void Engine::Finish(Sequence* seq, FinishReason reason, absl::Status status) {
  if (seq->detokenizer && reason != FinishReason::kCancelled && reason != FinishReason::kError) {
    // Release any bytes held back for an incomplete character.
    auto rest = seq->detokenizer->Finish();
    if (rest.ok() && !rest->empty()) seq->stop->OnToken(-1, seq->completion_tokens(), *rest);
  }
  // Blocks go back to the pool, and the published stats say so, before the final output can
  // reach the client: whoever saw every request end sees an empty cache.
  scheduler_.Remove(seq);
  {
    std::lock_guard<std::mutex> lock(mu_);
    stats_.scheduler = scheduler_.stats();
  }
  Emit(seq, true, reason, status);
  sequences_.erase(seq->id);
}

void Engine::AbortAll(const absl::Status& status) {
  // The executor's state is unknown after a failure: every request fails rather than waits.
  const absl::Status error(status.code(), absl::StrCat("step failed: ", status.message()));
  for (Sequence* seq : scheduler_.AllSequences()) Finish(seq, FinishReason::kError, error);
  in_flight_.clear();
}

}  // namespace llm
