#include "server/loadtest/sla_search.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "kernels/core/status.h"

namespace llm::loadtest {

absl::StatusOr<SlaSearchResult> SearchMaxRate(const SlaSearchOptions& options, const ProbeFn& probe) {
  if (!(options.start_rate > 0) || !(options.min_rate > 0) || options.max_rate < options.min_rate ||
      !(options.rel_tolerance > 0) || options.max_probes < 1)
    return absl::InvalidArgumentError("bad SLA search bounds");
  SlaSearchResult result;
  double lo = 0, hi = 0;  // highest passing, lowest failing (0: none yet)
  const auto run = [&](double rate) -> absl::Status {
    ASSIGN_OR_RETURN(ProbeOutcome outcome, probe(rate));
    outcome.rate = rate;
    result.probes.push_back(outcome);
    if (outcome.passed && rate > lo) {
      lo = rate;
      result.best_run_index = outcome.run_index;
    }
    if (!outcome.passed && (hi == 0 || rate < hi)) hi = rate;
    return absl::OkStatus();
  };
  const auto probes_left = [&] { return static_cast<int>(result.probes.size()) < options.max_probes; };

  double rate = std::clamp(options.start_rate, options.min_rate, options.max_rate);
  RETURN_IF_ERROR(run(rate));
  // Bracket.
  while (probes_left()) {
    if (hi == 0) {  // everything passed so far: go up
      if (rate >= options.max_rate) break;
      rate = std::min(rate * 2, options.max_rate);
    } else if (lo == 0) {  // everything failed so far: go down
      if (rate <= options.min_rate) break;
      rate = std::max(rate / 2, options.min_rate);
    } else {
      break;
    }
    RETURN_IF_ERROR(run(rate));
  }
  // Bisect.
  while (lo > 0 && hi > 0 && probes_left() && (hi - lo) > options.rel_tolerance * lo) {
    RETURN_IF_ERROR(run((lo + hi) / 2));
  }
  if (lo > 0 && hi > 0 && (hi - lo) <= options.rel_tolerance * lo) {
    result.stopped_by = "converged";
  } else if (!probes_left()) {
    result.stopped_by = "probe budget";
  } else if (hi == 0) {
    result.stopped_by = "max rate";
  } else if (lo == 0) {
    result.stopped_by = "min rate";
  } else {
    result.stopped_by = "converged";  // noisy probes: a rate passed above one that failed
  }
  result.found = lo > 0;
  result.best_rate = lo;
  result.lowest_failing_rate = hi;
  return result;
}

}  // namespace llm::loadtest
