#include "server/loadtest/load_runner.h"

#include <sys/resource.h>

#include <algorithm>

#include "server/loadtest/arrival_process.h"

namespace llm::loadtest {
namespace {

double ProcessCpuSeconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

}  // namespace

int64_t LoadRunner::NowNs() const {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(SteadyClock::now() - origin_).count();
}

void LoadRunner::Issue(int64_t index, bool warmup, int64_t scheduled_ns) {
  RequestSpec spec = workload_.Next();
  RequestRecord record;
  record.index = index;
  record.warmup = warmup;
  record.prompt_len = spec.prompt_len;
  record.turn = spec.turn;
  record.expected_output = spec.output_len;
  record.scheduled_ns = scheduled_ns;
  StreamCall* call = target_.NewCall(std::move(spec.request), std::move(record), origin_, this);
  {
    std::lock_guard<std::mutex> lock(mu_);
    calls_.insert(call);
    in_flight_.fetch_add(1, std::memory_order_relaxed);
  }
  if (!warmup) {
    int64_t unset = -1;
    measured_start_ns_.compare_exchange_strong(unset, NowNs());
  }
  sent_.fetch_add(1, std::memory_order_relaxed);
  call->Start(absl::ToChronoTime(absl::Now() + plan_.request_timeout));
}

void LoadRunner::Forget(StreamCall* call) {
  std::lock_guard<std::mutex> lock(mu_);
  calls_.erase(call);
}

void LoadRunner::Record(RequestRecord record) {
  if (record.ok()) {
    output_tokens_.fetch_add(record.output_tokens, std::memory_order_relaxed);
  } else {
    failed_.fetch_add(1, std::memory_order_relaxed);
  }
  done_.fetch_add(1, std::memory_order_relaxed);
  std::lock_guard<std::mutex> lock(mu_);
  if (record.warmup) {
    ++warmup_done_;
    warmup_records_.push_back(std::move(record));
  } else {
    measured_end_ns_ = std::max(measured_end_ns_, record.end_ns);
    records_.push_back(std::move(record));
  }
  in_flight_.fetch_sub(1, std::memory_order_relaxed);
  capacity_cv_.notify_all();
}

void LoadRunner::Stop() {
  stop_.store(true);
  std::lock_guard<std::mutex> lock(mu_);
  for (StreamCall* call : calls_) call->Cancel();
  stop_cv_.notify_all();
  capacity_cv_.notify_all();
}

RunProgress LoadRunner::Progress() const {
  RunProgress p;
  p.sent = sent_.load(std::memory_order_relaxed);
  p.done = done_.load(std::memory_order_relaxed);
  p.failed = failed_.load(std::memory_order_relaxed);
  p.in_flight = in_flight_.load(std::memory_order_relaxed);
  p.output_tokens = output_tokens_.load(std::memory_order_relaxed);
  p.planned = planned_.load();
  p.duration_s = duration_s_.load();
  p.elapsed_s = ((running_.load() ? NowNs() : ended_ns_.load()) - started_ns_.load()) / 1e9;
  p.warming_up = running_.load() && measured_start_ns_.load() < 0;
  return p;
}

RunResult LoadRunner::Run(const RunPlan& plan) {
  plan_ = plan;
  {
    std::lock_guard<std::mutex> lock(mu_);
    records_.clear();
    warmup_done_ = 0;
    measured_end_ns_ = 0;
  }
  for (auto* counter : {&sent_, &done_, &failed_, &in_flight_, &output_tokens_}) counter->store(0);
  measured_start_ns_.store(-1);
  planned_.store(plan.num_requests > 0 ? plan.num_requests + plan.warmup_requests : 0);
  duration_s_.store(absl::ToDoubleSeconds(plan.duration));
  started_ns_.store(NowNs());
  ended_ns_.store(0);
  running_.store(true);
  const double cpu_start = ProcessCpuSeconds();

  ArrivalProcess arrivals(plan.rate, plan.burstiness, plan.seed);
  const int64_t total =
      plan.num_requests > 0 ? plan.warmup_requests + plan.num_requests : std::numeric_limits<int64_t>::max();
  const int64_t duration_ns = absl::ToInt64Nanoseconds(plan.duration);
  int64_t next_ns = started_ns_.load();
  for (int64_t i = 0; i < total && !stopping(); ++i) {
    const bool warmup = i < plan.warmup_requests;
    if (plan.open_loop) {
      if (i > 0) next_ns += absl::ToInt64Nanoseconds(arrivals.NextGap());
      if (next_ns > NowNs()) {
        std::unique_lock<std::mutex> lock(mu_);
        stop_cv_.wait_until(lock, origin_ + std::chrono::nanoseconds(next_ns), [this] { return stopping(); });
      }
    }
    if (plan.concurrency > 0) {
      std::unique_lock<std::mutex> lock(mu_);
      capacity_cv_.wait(lock, [&] { return in_flight_.load() < plan.concurrency || stopping(); });
    }
    if (stopping()) break;
    if (!warmup && duration_ns > 0) {
      const int64_t start = measured_start_ns_.load();
      if (start >= 0 && NowNs() - start >= duration_ns) break;
    }
    Issue(i, warmup, plan.open_loop ? next_ns : NowNs());
  }
  {
    std::unique_lock<std::mutex> lock(mu_);
    capacity_cv_.wait(lock, [this] { return in_flight_.load() == 0; });
  }
  ended_ns_.store(NowNs());
  running_.store(false);

  RunResult result;
  result.plan = plan;
  result.client_cpu_s = ProcessCpuSeconds() - cpu_start;
  result.interrupted = stopping();
  std::lock_guard<std::mutex> lock(mu_);
  result.records = std::move(records_);
  records_.clear();
  result.warmup_records = std::move(warmup_records_);
  warmup_records_.clear();
  result.warmup_done = warmup_done_;
  result.measured_end_ns = measured_end_ns_;
  result.measured_start_ns = result.records.empty() ? 0 : result.records.front().send_ns;
  for (const RequestRecord& r : result.records)
    result.measured_start_ns = std::min(result.measured_start_ns, r.send_ns);
  return result;
}

}  // namespace llm::loadtest
