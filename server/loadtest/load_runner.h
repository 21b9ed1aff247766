// LoadRunner: runs one load level against the target and returns every request's record.
//
// Open loop: requests are started at the times of an ArrivalProcess (Poisson or bursty gamma),
// whatever the server's state; if the runner ever falls behind the schedule it starts the late
// requests at once and records each one's lag (send_ns - scheduled_ns), so a report shows when
// the generator, not the server, was the limit. Closed loop: `concurrency` requests are kept in
// flight. Both: open-loop arrivals with at most `concurrency` in flight (the others wait in the
// client; that wait counts in their lag, not their latency).
//
// The first `warmup_requests` are issued the same way and left out of the statistics. The run
// ends after `num_requests` measured requests, or when `duration` has passed since the first
// measured one; requests in flight then are awaited.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <limits>
#include <mutex>
#include <string>
#include <unordered_set>
#include <vector>

#include "absl/time/time.h"
#include "server/loadtest/request_record.h"
#include "server/loadtest/target.h"
#include "server/loadtest/workload.h"

namespace llm::loadtest {

struct RunPlan {
  bool open_loop = true;
  double rate = std::numeric_limits<double>::infinity();  // requests/s, open loop
  double burstiness = 1.0;                                // 1: Poisson
  int64_t concurrency = 0;                                // closed loop: in flight; open loop: cap (0: none)
  int64_t num_requests = 0;                               // measured requests; 0: until duration
  absl::Duration duration = absl::ZeroDuration();
  int64_t warmup_requests = 0;
  absl::Duration request_timeout = absl::Minutes(10);  // the gRPC deadline of each call
  uint64_t seed = 1;
};

struct RunResult {
  RunPlan plan;
  std::vector<RequestRecord> records;  // measured requests, in completion order
  // Warm-up requests: not in the statistics, but their tokens count where the server produced
  // them inside the steady-state window (RunReport).
  std::vector<RequestRecord> warmup_records;
  int64_t warmup_done = 0;
  int64_t measured_start_ns = 0;  // the first measured request was sent
  int64_t measured_end_ns = 0;    // the last measured request ended
  double client_cpu_s = 0;        // CPU time of this process during the run
  bool interrupted = false;       // Stop() was called
};

// Counters for the progress line, readable while a run goes on.
struct RunProgress {
  int64_t sent = 0;
  int64_t done = 0;
  int64_t failed = 0;
  int64_t in_flight = 0;
  int64_t output_tokens = 0;
  int64_t planned = 0;  // 0: until the duration ends
  double elapsed_s = 0;
  double duration_s = 0;
  bool warming_up = false;
};

class LoadRunner : private StreamCall::Owner {
 public:
  LoadRunner(Target& target, Workload& workload)
      : target_(target), workload_(workload), origin_(SteadyClock::now()) {}

  RunResult Run(const RunPlan& plan);
  // From any thread: stop issuing and cancel the calls in flight; Run returns what it has.
  void Stop();
  RunProgress Progress() const;

 private:
  void Issue(int64_t index, bool warmup, int64_t scheduled_ns);
  void Forget(StreamCall* call) override;
  void Record(RequestRecord record) override;
  int64_t NowNs() const;
  bool stopping() const { return stop_.load(std::memory_order_relaxed); }

  Target& target_;
  Workload& workload_;
  RunPlan plan_;
  const SteadyClock::time_point origin_;  // time zero of every record

  mutable std::mutex mu_;
  std::condition_variable capacity_cv_;      // a call ended (in_flight_ fell)
  std::condition_variable stop_cv_;          // Stop() was called
  std::unordered_set<StreamCall*> calls_;  // in flight, for Stop()
  std::vector<RequestRecord> records_;
  std::vector<RequestRecord> warmup_records_;
  int64_t warmup_done_ = 0;
  int64_t measured_end_ns_ = 0;
  std::atomic<bool> stop_{false};

  std::atomic<int64_t> sent_{0}, done_{0}, failed_{0}, in_flight_{0}, output_tokens_{0};
  std::atomic<int64_t> measured_start_ns_{-1};
  std::atomic<bool> running_{false};
  // For Progress(), which may run on another thread while Run() starts or ends.
  std::atomic<int64_t> planned_{0};
  std::atomic<double> duration_s_{0};
  std::atomic<int64_t> started_ns_{0}, ended_ns_{0};
};

}  // namespace llm::loadtest
