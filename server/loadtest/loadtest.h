// RunLoadtest: `llm loadtest` from its parsed flags: connects to the server, builds the workload,
// runs one load level, a sweep of levels (several --rate or --concurrency values) or an SLA
// search, prints the report, and writes the JSON report and plots when asked.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "server/loadtest/length_distribution.h"
#include "server/loadtest/sla.h"
#include "server/loadtest/sla_search.h"

namespace llm::loadtest {

struct LoadtestConfig {
  // grpc: llm.v1 Generate at HOST:PORT; openai / openai-chat: the OpenAI-compatible HTTP API at
  // http://HOST:PORT (/v1/completions or /v1/chat/completions, streamed).
  std::string backend = "grpc";
  std::string target = "localhost:50051";
  std::string api_key;
  int connections = 4;
  absl::Duration connect_timeout = absl::Seconds(30);

  // Workload.
  LengthDistribution input_len = LengthDistribution::Fixed(128);
  LengthDistribution output_len = LengthDistribution::Fixed(128);
  std::string dataset_path;
  bool output_len_set = false;  // with a dataset: --output-len overrides the file's lengths
  double temperature = 0;
  double top_p = 1;  // < 1: nucleus sampling (with temperature > 0)
  bool honor_eos = false;
  int64_t shared_prefix_len = 0;  // WorkloadOptions: prefix caching scenarios
  int64_t shared_prefixes = 1;
  int64_t turns = 0;
  int64_t conversations = 16;

  // Load: open loop at each rate, else closed loop at each concurrency. With one concurrency and
  // rates, the concurrency caps the open-loop requests in flight.
  std::vector<double> rates;
  double burstiness = 1;
  std::vector<int64_t> concurrencies;
  int64_t num_requests = 0;  // per load level; 0 with a duration
  absl::Duration duration = absl::ZeroDuration();
  int64_t warmup_requests = 0;
  absl::Duration request_timeout = absl::Minutes(10);
  uint64_t seed = 1;

  // SLA.
  std::optional<SlaLimits> sla;
  bool search = false;  // search the highest rate meeting `sla`
  SlaSearchOptions search_options;

  // Output.
  std::string json_out;
  bool json_requests = false;  // per-request records in the JSON
  std::string plot_dir;
  std::string gnuplot = "gnuplot";
  std::string plot_format = "svg";                      // or "png"
  absl::Duration progress_interval = absl::Seconds(1);  // zero: no progress line
};

// Returns a non-OK status on a setup error (unreachable server, bad dataset, a workload that does
// not fit). Failed requests are reported, not returned; `*all_ok` says whether every measured
// request succeeded (and, with an SLA, whether the run or search met it).
absl::Status RunLoadtest(const LoadtestConfig& config, bool* all_ok);

}  // namespace llm::loadtest
