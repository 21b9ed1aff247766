// The human-readable report on stdout: one full table per run, and a summary row per run for
// sweeps and SLA searches.
#pragma once

#include <string>
#include <vector>

#include "server/loadtest/run_report.h"

namespace llm::loadtest {

// "Poisson 12.5 req/s", "gamma (burstiness 0.5) 4 req/s", "closed loop, 32 in flight".
std::string DescribeLoad(const RunReport& r);

// Counts, throughput, a P50/P90/P99/max table of TTFT, TPOT, ITL, E2E and queue time, errors.
std::string FormatRunTable(const RunReport& r);

// One row per run: load, achieved throughput, P50/P99 TTFT and TPOT, P99 ITL and E2E, errors and
// (with an SLA) whether it was met.
std::string FormatSummaryTable(const std::vector<RunReport>& runs);

}  // namespace llm::loadtest
