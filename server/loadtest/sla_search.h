// SearchMaxRate: the highest open-loop request rate whose run meets the SLA. Each probe is one
// run of a fixed number of requests at a Poisson (or gamma) rate. Bracket: from start_rate,
// double while probes pass (or halve while they fail) until one passes and a higher one fails
// (or a bound is reached); then bisect between them until the gap is within rel_tolerance of
// the passing rate, or max_probes were run. The answer is the highest passing rate probed.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace llm::loadtest {

struct SlaSearchOptions {
  double start_rate = 1;   // requests/s
  double min_rate = 0.01;  // give up below this (nothing passes)
  double max_rate = 1e6;   // stop bracketing above this (everything passes)
  double rel_tolerance = 0.05;
  int max_probes = 16;
};

struct ProbeOutcome {
  double rate = 0;
  bool passed = false;
  std::string why;     // the limit missed
  int run_index = -1;  // which run (the caller's numbering)
};

struct SlaSearchResult {
  std::vector<ProbeOutcome> probes;  // in the order they ran
  bool found = false;                // some rate passed
  double best_rate = 0;              // the highest passing rate
  int best_run_index = -1;
  double lowest_failing_rate = 0;  // 0: none failed
  // Why it stopped: "converged" (within the tolerance), "max rate" (everything passed up to
  // max_rate), "min rate" (nothing passed down to min_rate), "probe budget" (max_probes ran).
  std::string stopped_by;
};

// `probe(rate)` runs one load level and says whether it met the SLA; a non-OK status aborts.
using ProbeFn = std::function<absl::StatusOr<ProbeOutcome>(double rate)>;

absl::StatusOr<SlaSearchResult> SearchMaxRate(const SlaSearchOptions& options, const ProbeFn& probe);

}  // namespace llm::loadtest
