// Plots of load-test results, drawn by gnuplot (SVG, or PNG): the data (.dat) and the gnuplot script (.gp)
// are written next to each picture, so a plot can be redrawn or restyled by hand.
//   latency_vs_load.svg  TTFT, TPOT/ITL and E2E percentiles and throughput against offered load
//                        (the offered rate; achieved req/s for closed-loop runs; an "all at once"
//                        run at the right end of the axis, as the highest load), SLA limits dashed
//                        and labelled with their metric and value, legends below the panels
//   distributions.svg    CDFs of TTFT, TPOT, ITL and E2E, one curve per run (at most 6)
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "server/loadtest/run_report.h"

namespace llm::loadtest {

// A run's latency samples, sorted (ms).
struct RunSamples {
  std::vector<double> ttft, tpot, itl, e2e;
};
RunSamples CollectSamples(const RunResult& result);

struct PlotRun {
  std::string label;  // legend: "4 req/s", "32 in flight"
  double x = 0;       // position on the load axis (ignored when all_at_once)
  bool all_at_once = false;  // an open-loop run with an infinite rate: drawn past the others
  RunReport report;
  RunSamples samples;
};

struct PlotOptions {
  std::string dir;
  std::string gnuplot = "gnuplot";
  std::string format = "svg";  // or "png"
  std::string title;           // e.g. the model and the workload
};

// Writes the plots of `runs` (in any order) into options.dir (created if needed); `written`
// receives the SVG paths. Without gnuplot the data and scripts are still written and the status
// says so.
absl::Status WritePlots(const PlotOptions& options, const std::vector<PlotRun>& runs,
                        const std::optional<SlaLimits>& sla, std::vector<std::string>* written);

}  // namespace llm::loadtest
