#include "server/grpc/server_metrics.h"

#include "absl/strings/str_cat.h"

namespace llm::server {
namespace {

std::string StatusCodeName(absl::StatusCode code) {
  // Upper case, as gRPC writes them (INVALID_ARGUMENT, ...).
  std::string name = absl::StatusCodeToString(code);
  for (char& c : name) c = (c == ' ') ? '_' : static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return name;
}

// Writes metric families whose samples all carry the model_name label.
class Exposition {
 public:
  explicit Exposition(const std::string& model_name)
      : label_(model_name.empty() ? "" : absl::StrCat("model_name=\"", Escape(model_name), "\"")) {}

  void Family(const char* type, const std::string& name, const std::string& help) {
    absl::StrAppend(&out_, "# HELP ", name, " ", help, "\n# TYPE ", name, " ", type, "\n");
  }
  // `labels`: further labels ("finish_reason=\"stop\""), or empty.
  template <typename T>
  void Sample(const std::string& name, T value, const std::string& labels = "") {
    std::string all = label_;
    if (!labels.empty()) all = all.empty() ? labels : absl::StrCat(all, ",", labels);
    absl::StrAppend(&out_, name, all.empty() ? "" : absl::StrCat("{", all, "}"), " ", value, "\n");
  }
  template <typename T>
  void Single(const char* type, const std::string& name, const std::string& help, T value) {
    Family(type, name, help);
    Sample(name, value);
  }
  void Histo(const Histogram& h, const std::string& name, const std::string& help) {
    h.Render(name, help, &out_, label_);
  }
  std::string Take() { return std::move(out_); }

 private:
  // Label values escape backslash, double quote and newline.
  static std::string Escape(const std::string& value) {
    std::string out;
    for (char c : value) {
      if (c == '\\' || c == '"') out += '\\';
      if (c == '\n') {
        out += "\\n";
        continue;
      }
      out += c;
    }
    return out;
  }

  std::string label_;
  std::string out_;
};

}  // namespace

ServerMetrics::ServerMetrics()
    : time_to_first_token_(Histogram::RequestLatencyBounds()),
      inter_token_(Histogram::TokenLatencyBounds()),
      end_to_end_(Histogram::RequestLatencyBounds()),
      queue_time_(Histogram::RequestLatencyBounds()),
      prefill_time_(Histogram::RequestLatencyBounds()),
      decode_time_(Histogram::RequestLatencyBounds()),
      prompt_tokens_(Histogram::TokenCountBounds()),
      generation_tokens_(Histogram::TokenCountBounds()) {
  token_samples_.push_back({absl::Now(), 0});
}

void ServerMetrics::RecordFinished(const RequestOutput& last) {
  const RequestTimings& timings = last.timings;
  finished_[static_cast<int>(last.finish_reason)].fetch_add(1, std::memory_order_relaxed);
  end_to_end_.Observe(timings.total_ms / 1e3);
  prompt_tokens_.Observe(last.prompt_tokens);
  generation_tokens_.Observe(last.completion_tokens);
  if (timings.ttft_ms > 0) {
    time_to_first_token_.Observe(timings.ttft_ms / 1e3);
    queue_time_.Observe(timings.queue_ms / 1e3);
    prefill_time_.Observe(std::max(0.0, timings.ttft_ms - timings.queue_ms) / 1e3);
    decode_time_.Observe(timings.decode_ms / 1e3);
  }
}

void ServerMetrics::RecordTokenGap(absl::Duration gap, int tokens) {
  if (tokens <= 0) return;
  const double each = absl::ToDoubleSeconds(gap) / tokens;
  for (int i = 0; i < tokens; ++i) inter_token_.Observe(each);
}

void ServerMetrics::RecordRejected(absl::StatusCode code) {
  const int index = static_cast<int>(code);
  if (index >= 0 && index < kNumCodes) rejected_[index].fetch_add(1, std::memory_order_relaxed);
}

double ServerMetrics::TokensPerSecond(uint64_t generated_tokens) const {
  const absl::Time now = absl::Now();
  std::lock_guard<std::mutex> lock(rate_mu_);
  while (token_samples_.size() > 1 && now - token_samples_[1].time >= absl::Minutes(1))
    token_samples_.pop_front();
  const TokenSample& oldest = token_samples_.front();
  const double seconds = absl::ToDoubleSeconds(now - oldest.time);
  const double rate = seconds > 0 ? static_cast<double>(generated_tokens - oldest.tokens) / seconds : 0.0;
  token_samples_.push_back({now, generated_tokens});
  return rate;
}

std::string ServerMetrics::Render(const std::string& model_name, const std::optional<EngineStats>& stats,
                                  const EngineInfo* info, const EngineStepMetrics* steps) const {
  Exposition e(model_name);
  e.Family("counter", "llm_requests_finished_total", "Requests that ended, by finish reason.");
  for (int r = 1; r < kNumReasons; ++r)
    e.Sample("llm_requests_finished_total", finished_[r].load(std::memory_order_relaxed),
             absl::StrCat("finish_reason=\"", std::string(FinishReasonName(static_cast<FinishReason>(r))), "\""));
  e.Family("counter", "llm_requests_rejected_total",
           "Requests refused before reaching the engine queue, by status code (gRPC's names; HTTP maps them).");
  for (int c = 1; c < kNumCodes; ++c) {
    const uint64_t n = rejected_[c].load(std::memory_order_relaxed);
    if (n > 0 || c == static_cast<int>(absl::StatusCode::kInvalidArgument) ||
        c == static_cast<int>(absl::StatusCode::kResourceExhausted))
      e.Sample("llm_requests_rejected_total", n,
               absl::StrCat("code=\"", StatusCodeName(static_cast<absl::StatusCode>(c)), "\""));
  }
  e.Histo(time_to_first_token_, "llm_time_to_first_token_seconds",
          "Time from a request's arrival to its first generated token.");
  e.Histo(inter_token_, "llm_inter_token_latency_seconds", "Time between consecutive tokens of one request.");
  e.Histo(end_to_end_, "llm_request_duration_seconds", "Time from a request's arrival to its end.");
  e.Histo(queue_time_, "llm_request_queue_time_seconds", "Time from a request's arrival to its first step.");
  e.Histo(prefill_time_, "llm_request_prefill_time_seconds",
          "Time from a request's first step to its first token (prefill).");
  e.Histo(decode_time_, "llm_request_decode_time_seconds", "Time from a request's first token to its end.");
  e.Histo(prompt_tokens_, "llm_request_prompt_tokens", "Prompt length of finished requests, in tokens.");
  e.Histo(generation_tokens_, "llm_request_generation_tokens",
          "Generated tokens of finished requests.");

  e.Single("gauge", "llm_model_loaded", "1 once the model is loaded and the engine runs.", stats ? 1 : 0);
  if (!stats || !info) return e.Take();
  const SchedulerStats& s = stats->scheduler;
  e.Single("gauge", "llm_requests_running", "Requests scheduled in the running batch.", s.running);
  e.Single("gauge", "llm_requests_waiting", "Requests waiting to be scheduled (including preempted ones).",
           s.waiting);
  e.Single("gauge", "llm_kv_cache_blocks_used", "KV cache blocks held by requests.", s.kv_blocks_used);
  e.Single("gauge", "llm_kv_cache_capacity_blocks", "KV cache capacity in blocks.", s.kv_blocks_total);
  e.Single("gauge", "llm_kv_cache_usage_ratio", "Fraction of KV cache blocks in use.",
           s.kv_blocks_total > 0 ? static_cast<double>(s.kv_blocks_used) / s.kv_blocks_total : 0.0);
  e.Single("counter", "llm_preemptions_total", "Requests preempted for KV cache space (recomputed later).",
           s.preemptions);
  e.Single("counter", "llm_generated_tokens_total", "Tokens generated.", stats->generated_tokens);
  e.Single("counter", "llm_prompt_tokens_total", "Prompt tokens prefilled (recomputation included).",
           stats->prompt_tokens);
  e.Single("counter", "llm_engine_steps_total", "Engine steps run.", stats->steps);
  e.Single("counter", "llm_prefix_cache_queries_total",
           "Prompt tokens looked up in the prefix cache when requests were admitted.",
           s.prefix_cache_queried_tokens);
  e.Single("counter", "llm_prefix_cache_hits_total", "Of those, tokens found in the cache (not computed).",
           s.prefix_cache_hit_tokens);
  e.Single("gauge", "llm_prefix_cache_blocks", "KV blocks whose content is in the prefix cache's index.",
           s.prefix_cache_blocks);
  e.Single("counter", "llm_prefix_cache_evictions_total",
           "Cached blocks that nobody held given out for other content.", s.prefix_cache_evictions);
  e.Single("gauge", "llm_generation_tokens_per_second",
           "Generated tokens per second over the last minute (since start at the first scrape).",
           TokensPerSecond(stats->generated_tokens));
  e.Single("gauge", "llm_context_length", "The most prompt + generated tokens of one request.", info->max_context);
  e.Single("counter", "llm_device_busy_seconds_total",
           "Device time of the engine's steps (where the executor times them).", stats->device_busy_seconds);
  e.Single("counter", "llm_device_idle_seconds_total",
           "Device idle time between consecutive engine steps: idle / (busy + idle) is the share of time the "
           "device waited for the host.",
           stats->device_idle_seconds);
  if (steps != nullptr) {
    e.Histo(steps->schedule_seconds, "llm_step_schedule_seconds", "Engine thread: planning a step.");
    e.Histo(steps->launch_seconds, "llm_step_launch_seconds", "Engine thread: launching a step (upload, enqueue).");
    e.Histo(steps->wait_seconds, "llm_step_wait_seconds", "Engine thread: waiting for a step's results.");
    e.Histo(steps->collect_seconds, "llm_step_collect_seconds",
            "Engine thread: taking a step's results (stop checks, events).");
    e.Histo(steps->device_seconds, "llm_step_device_seconds", "Device time of one step.");
    e.Histo(steps->output_seconds, "llm_step_output_seconds",
            "Output thread: one step's outputs (detokenization, stop strings, delivery).");
    e.Histo(steps->sequences, "llm_step_sequences", "Sequences in one step.");
    e.Histo(steps->tokens, "llm_step_tokens", "Tokens (prompt and generated) in one step.");
  }
  return e.Take();
}

void RequestMetricsRecorder::OnOutput(const RequestOutput& output) {
  const absl::Time now = absl::Now();
  const int tokens = static_cast<int>(output.token_ids.size());
  if (tokens > 0) {
    if (last_tokens_ != absl::InfinitePast()) metrics_.RecordTokenGap(now - last_tokens_, tokens);
    last_tokens_ = now;
  }
  if (output.finished) metrics_.RecordFinished(output);
}

}  // namespace llm::server
