#include "engine/engine.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/engine_core.h"
#include "engine/replica_router.h"
#include "engine/runtime/step_executor.h"
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

// The façade: validation, ids and seeds, and routing over the replicas' cores.
class Engine::Impl {
 public:
  Impl(const EngineInfo& info, const EngineOptions& options, std::shared_ptr<const Tokenizer> tokenizer)
      : info_(info),
        options_(options),
        tokenizer_(std::move(tokenizer)),
        router_(options.scheduler.block_size, options.scheduler.prefix_caching) {}
  ~Impl() { Shutdown(false); }

  absl::Status Validate(const GenerateRequest& request) const;
  absl::StatusOr<RequestId> Submit(GenerateRequest request, OutputCallback callback);
  void Cancel(RequestId id);
  void Shutdown(bool drain);
  EngineStats stats() const;
  absl::Status Health() const;
  bool failed() const;

  const EngineInfo info_;
  const EngineOptions options_;
  std::shared_ptr<const Tokenizer> tokenizer_;
  EngineStepMetrics metrics_;
  std::vector<std::unique_ptr<EngineCore>> cores_;

 private:
  // The replica for a new request (ReplicaRouter: where its prefix was sent before, else the
  // least loaded of those that run steps, else of those getting new workers, where it waits);
  // null when none will ever serve.
  EngineCore* Route(const Sequence& seq);

  ReplicaRouter router_;

  std::atomic<RequestId> next_id_{1};
};

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
  if (r.logit_bias.size() > static_cast<size_t>(kMaxLogitBiasTokens))
    return bad("logit_bias has ", r.logit_bias.size(), " tokens; at most ", kMaxLogitBiasTokens, " are allowed");
  std::vector<int32_t> biased;
  biased.reserve(r.logit_bias.size());
  for (const LogitBias& b : r.logit_bias) {
    if (b.token < 0 || b.token >= vocab)
      return bad("logit_bias token id ", b.token, " is outside the vocabulary [0, ", vocab, ")");
    if (!(std::fabs(b.bias) <= kMaxLogitBias))
      return bad("logit_bias of token ", b.token, " must be in [-", kMaxLogitBias, ", ", kMaxLogitBias, "], got ", b.bias);
    biased.push_back(b.token);
  }
  std::sort(biased.begin(), biased.end());
  if (auto twice = std::adjacent_find(biased.begin(), biased.end()); twice != biased.end())
    return bad("logit_bias names token ", *twice, " twice");
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
  EngineCore* core = Route(*seq);
  if (core == nullptr) {
    const absl::Status health = Health();
    return health.ok() ? absl::UnavailableError("no replica takes requests") : health;
  }
  seq->id = next_id_.fetch_add(1, std::memory_order_relaxed);
  streamed.id = seq->id;
  const RequestId id = seq->id;
  RETURN_IF_ERROR(core->Enqueue(std::move(seq), std::move(streamed)));
  return id;
}

EngineCore* Engine::Impl::Route(const Sequence& seq) {
  if (cores_.size() == 1) return cores_[0]->health().ok() ? cores_[0].get() : nullptr;
  std::vector<ReplicaRouter::Replica> replicas(cores_.size());
  for (size_t i = 0; i < cores_.size(); ++i)
    replicas[i] = {cores_[i]->health().ok(), cores_[i]->available(), cores_[i]->load()};
  const int chosen = router_.Pick(replicas, seq.tokens, seq.salt_hash);
  return chosen < 0 ? nullptr : cores_[chosen].get();
}

void Engine::Impl::Cancel(RequestId id) {
  // Each core ignores ids it does not hold: cheaper than a map of ids kept for every request.
  for (const auto& core : cores_) core->Stop(id, FinishReason::kCancelled, absl::OkStatus());
}

void Engine::Impl::Shutdown(bool drain) {
  for (const auto& core : cores_) core->Shutdown(drain);
}

EngineStats Engine::Impl::stats() const {
  EngineStats total;
  total.replicas = static_cast<int32_t>(cores_.size());
  total.replicas_serving = 0;
  for (const auto& core : cores_) {
    const EngineStats s = core->stats();
    SchedulerStats& t = total.scheduler;
    t.running += s.scheduler.running;
    t.waiting += s.scheduler.waiting;
    t.kv_blocks_used += s.scheduler.kv_blocks_used;
    t.kv_blocks_total += s.scheduler.kv_blocks_total;
    t.preemptions += s.scheduler.preemptions;
    t.prefix_cache_queried_tokens += s.scheduler.prefix_cache_queried_tokens;
    t.prefix_cache_hit_tokens += s.scheduler.prefix_cache_hit_tokens;
    t.prefix_cache_blocks += s.scheduler.prefix_cache_blocks;
    t.prefix_cache_evictions += s.scheduler.prefix_cache_evictions;
    total.steps += s.steps;
    total.generated_tokens += s.generated_tokens;
    total.prompt_tokens += s.prompt_tokens;
    total.device_busy_seconds += s.device_busy_seconds;
    total.device_idle_seconds += s.device_idle_seconds;
    total.replicas_serving += s.replicas_serving;
    total.recoveries += s.recoveries;
  }
  return total;
}

absl::Status Engine::Impl::Health() const {
  absl::Status why;
  for (const auto& core : cores_) {
    if (core->available() && core->health().ok()) return absl::OkStatus();
    if (why.ok() || !core->health().ok()) why = core->health();
  }
  if (!failed())
    return absl::UnavailableError(
        "the workers are being replaced after a failure; requests wait for them (see the server log)");
  return absl::UnavailableError(why.message());
}

bool Engine::Impl::failed() const {
  for (const auto& core : cores_)
    if (core->health().ok()) return false;
  return true;
}

// --- the façade ---

absl::StatusOr<std::unique_ptr<Engine>> Engine::Create(const EngineInfo& info, const EngineOptions& options,
                                                       std::unique_ptr<StepExecutor> executor,
                                                       std::shared_ptr<const Tokenizer> tokenizer) {
  std::vector<std::unique_ptr<StepExecutor>> replicas;
  replicas.push_back(std::move(executor));
  return Create(info, options, std::move(replicas), std::move(tokenizer));
}

absl::StatusOr<std::unique_ptr<Engine>> Engine::Create(const EngineInfo& info, const EngineOptions& options,
                                                       std::vector<std::unique_ptr<StepExecutor>> replicas,
                                                       std::shared_ptr<const Tokenizer> tokenizer) {
  if (replicas.empty()) return absl::InvalidArgumentError("engine needs a step executor");
  for (const auto& executor : replicas)
    if (!executor) return absl::InvalidArgumentError("engine needs a step executor");
  const SchedulerOptions& s = options.scheduler;
  auto missing = [](const char* what, int64_t value) {
    return absl::InvalidArgumentError(absl::StrCat("engine options incomplete: ", what, " is ", value));
  };
  if (s.num_blocks <= 0) return missing("the KV block count", s.num_blocks);
  if (s.block_size <= 0) return missing("the KV block size", s.block_size);
  if (s.block_table_width <= 0) return missing("the block table width", s.block_table_width);
  if (s.max_seqs <= 0) return missing("the sequence limit", s.max_seqs);
  if (s.max_tokens_per_step <= 0) return missing("the step's token budget", s.max_tokens_per_step);
  if (options.max_context <= 0) return missing("the context length", options.max_context);
  auto impl = std::make_unique<Impl>(info, options, tokenizer);
  for (size_t i = 0; i < replicas.size(); ++i)
    impl->cores_.push_back(std::make_unique<EngineCore>(static_cast<int>(i), info, options, std::move(replicas[i]),
                                                        tokenizer, &impl->metrics_));
  return std::unique_ptr<Engine>(new Engine(std::move(impl)));
}

Engine::Engine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Engine::~Engine() { Shutdown(false); }

absl::StatusOr<RequestId> Engine::Submit(GenerateRequest request, OutputCallback callback) {
  return impl_->Submit(std::move(request), std::move(callback));
}
void Engine::Cancel(RequestId id) { impl_->Cancel(id); }
void Engine::Shutdown(bool drain) { impl_->Shutdown(drain); }
absl::Status Engine::Health() const { return impl_->Health(); }
bool Engine::failed() const { return impl_->failed(); }
const EngineInfo& Engine::info() const { return impl_->info_; }
EngineStats Engine::stats() const { return impl_->stats(); }
const EngineStepMetrics& Engine::step_metrics() const { return impl_->metrics_; }
const Tokenizer* Engine::tokenizer() const { return impl_->tokenizer_.get(); }
absl::Status Engine::Validate(const GenerateRequest& request) const { return impl_->Validate(request); }

}  // namespace llm
