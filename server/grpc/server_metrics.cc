#include "server/grpc/server_metrics.h"

#include "absl/strings/str_cat.h"

namespace llm::server {
namespace {

void Metric(std::string* out, const char* type, const std::string& name, const std::string& help) {
  absl::StrAppend(out, "# HELP ", name, " ", help, "\n# TYPE ", name, " ", type, "\n");
}

template <typename T>
void Sample(std::string* out, const std::string& name, T value) {
  absl::StrAppend(out, name, " ", value, "\n");
}

std::string StatusCodeName(absl::StatusCode code) {
  // Upper case, as gRPC writes them (INVALID_ARGUMENT, ...).
  std::string name = absl::StatusCodeToString(code);
  for (char& c : name) c = (c == ' ') ? '_' : static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return name;
}

}  // namespace

ServerMetrics::ServerMetrics()
    : time_to_first_token_(Histogram::RequestLatencyBounds()),
      inter_token_(Histogram::TokenLatencyBounds()),
      end_to_end_(Histogram::RequestLatencyBounds()),
      queue_time_(Histogram::RequestLatencyBounds()) {
  token_samples_.push_back({absl::Now(), 0});
}

void ServerMetrics::RecordFinished(FinishReason reason, const RequestTimings& timings) {
  finished_[static_cast<int>(reason)].fetch_add(1, std::memory_order_relaxed);
  end_to_end_.Observe(timings.total_ms / 1e3);
  if (timings.ttft_ms > 0) {
    time_to_first_token_.Observe(timings.ttft_ms / 1e3);
    queue_time_.Observe(timings.queue_ms / 1e3);
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

std::string ServerMetrics::Render(const std::optional<EngineStats>& stats, const EngineInfo* info,
                                  const EngineStepMetrics* steps) const {
  std::string out;
  Metric(&out, "counter", "llm_requests_finished_total", "Requests that ended, by finish reason.");
  for (int r = 1; r < kNumReasons; ++r)
    absl::StrAppend(&out, "llm_requests_finished_total{finish_reason=\"",
                    std::string(FinishReasonName(static_cast<FinishReason>(r))), "\"} ",
                    finished_[r].load(std::memory_order_relaxed), "\n");
  Metric(&out, "counter", "llm_requests_rejected_total",
         "Requests refused before reaching the engine queue, by gRPC status code.");
  for (int c = 1; c < kNumCodes; ++c) {
    const uint64_t n = rejected_[c].load(std::memory_order_relaxed);
    if (n > 0 || c == static_cast<int>(absl::StatusCode::kInvalidArgument) ||
        c == static_cast<int>(absl::StatusCode::kResourceExhausted))
      absl::StrAppend(&out, "llm_requests_rejected_total{code=\"",
                      StatusCodeName(static_cast<absl::StatusCode>(c)), "\"} ", n, "\n");
  }
  time_to_first_token_.Render("llm_time_to_first_token_seconds",
                              "Time from a request's arrival to its first generated token.", &out);
  inter_token_.Render("llm_inter_token_latency_seconds", "Time between consecutive tokens of one request.",
                      &out);
  end_to_end_.Render("llm_request_duration_seconds", "Time from a request's arrival to its end.", &out);
  queue_time_.Render("llm_request_queue_time_seconds", "Time from a request's arrival to its first step.",
                     &out);

  Metric(&out, "gauge", "llm_model_loaded", "1 once the model is loaded and the engine runs.");
  Sample(&out, "llm_model_loaded", stats ? 1 : 0);
  if (!stats || !info) return out;
  const SchedulerStats& s = stats->scheduler;
  Metric(&out, "gauge", "llm_requests_running", "Requests scheduled in the running batch.");
  Sample(&out, "llm_requests_running", s.running);
  Metric(&out, "gauge", "llm_requests_waiting",
         "Requests waiting to be scheduled (including preempted ones).");
  Sample(&out, "llm_requests_waiting", s.waiting);
  Metric(&out, "gauge", "llm_kv_cache_blocks_used", "KV cache blocks held by requests.");
  Sample(&out, "llm_kv_cache_blocks_used", s.kv_blocks_used);
  Metric(&out, "gauge", "llm_kv_cache_blocks_total", "KV cache capacity in blocks.");
  Sample(&out, "llm_kv_cache_blocks_total", s.kv_blocks_total);
  Metric(&out, "gauge", "llm_kv_cache_usage_ratio", "Fraction of KV cache blocks in use.");
  Sample(&out, "llm_kv_cache_usage_ratio",
         s.kv_blocks_total > 0 ? static_cast<double>(s.kv_blocks_used) / s.kv_blocks_total : 0.0);
  Metric(&out, "counter", "llm_preemptions_total",
         "Requests preempted for KV cache space (recomputed later).");
  Sample(&out, "llm_preemptions_total", s.preemptions);
  Metric(&out, "counter", "llm_generated_tokens_total", "Tokens generated.");
  Sample(&out, "llm_generated_tokens_total", stats->generated_tokens);
  Metric(&out, "counter", "llm_prompt_tokens_total", "Prompt tokens prefilled (recomputation included).");
  Sample(&out, "llm_prompt_tokens_total", stats->prompt_tokens);
  Metric(&out, "counter", "llm_engine_steps_total", "Engine steps run.");
  Sample(&out, "llm_engine_steps_total", stats->steps);
  Metric(&out, "gauge", "llm_generation_tokens_per_second",
         "Generated tokens per second over the last minute (since start at the first scrape).");
  Sample(&out, "llm_generation_tokens_per_second", TokensPerSecond(stats->generated_tokens));
  Metric(&out, "gauge", "llm_context_length", "The most prompt + generated tokens of one request.");
  Sample(&out, "llm_context_length", info->max_context);
  Metric(&out, "counter", "llm_device_busy_seconds_total",
         "Device time of the engine's steps (where the executor times them).");
  Sample(&out, "llm_device_busy_seconds_total", stats->device_busy_seconds);
  Metric(&out, "counter", "llm_device_idle_seconds_total",
         "Device idle time between consecutive engine steps: idle / (busy + idle) is the share of time the "
         "device waited for the host.");
  Sample(&out, "llm_device_idle_seconds_total", stats->device_idle_seconds);
  if (steps != nullptr) {
    steps->schedule_seconds.Render("llm_step_schedule_seconds", "Engine thread: planning a step.", &out);
    steps->launch_seconds.Render("llm_step_launch_seconds", "Engine thread: launching a step (upload, enqueue).",
                                 &out);
    steps->wait_seconds.Render("llm_step_wait_seconds", "Engine thread: waiting for a step's results.", &out);
    steps->collect_seconds.Render("llm_step_collect_seconds",
                                  "Engine thread: taking a step's results (stop checks, events).", &out);
    steps->device_seconds.Render("llm_step_device_seconds", "Device time of one step.", &out);
    steps->output_seconds.Render("llm_step_output_seconds",
                                 "Output thread: one step's outputs (detokenization, stop strings, delivery).", &out);
    steps->sequences.Render("llm_step_sequences", "Sequences in one step.", &out);
    steps->tokens.Render("llm_step_tokens", "Tokens (prompt and generated) in one step.", &out);
  }
  return out;
}

void RequestMetricsRecorder::OnOutput(const RequestOutput& output) {
  const absl::Time now = absl::Now();
  const int tokens = static_cast<int>(output.token_ids.size());
  if (tokens > 0) {
    if (last_tokens_ != absl::InfinitePast()) metrics_.RecordTokenGap(now - last_tokens_, tokens);
    last_tokens_ = now;
  }
  if (output.finished) metrics_.RecordFinished(output.finish_reason, output.timings);
}

}  // namespace llm::server
