// WritePlots without a working gnuplot: the status says so, and both plots' data and scripts are
// still written (the GPU machines have no gnuplot; their plots are drawn afterwards elsewhere).
#include "server/loadtest/plots.h"

#include <unistd.h>
#include <filesystem>
#include <fstream>

#include "gtest/gtest.h"

namespace llm::loadtest {
namespace {

TEST(PlotsTest, ScriptsAndDataWrittenWhenGnuplotIsMissing) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::path(::testing::TempDir()) / ("plots_without_gnuplot_" + std::to_string(getpid()));
  fs::remove_all(dir);
  std::vector<PlotRun> runs;
  for (int level = 1; level <= 3; ++level) {
    PlotRun run;
    run.label = std::to_string(level) + " req/s";
    run.x = level;
    for (int i = 1; i <= 20; ++i) {
      run.samples.ttft.push_back(10.0 * level + i);
      run.samples.tpot.push_back(1.0 * level + 0.1 * i);
      run.samples.itl.push_back(1.0 * level + 0.05 * i);
      run.samples.e2e.push_back(100.0 * level + i);
    }
    runs.push_back(run);
  }
  PlotOptions options;
  options.dir = dir.string();
  options.gnuplot = "/nonexistent/gnuplot";
  std::vector<std::string> written;
  const absl::Status s = WritePlots(options, runs, std::nullopt, &written);
  EXPECT_FALSE(s.ok());
  EXPECT_TRUE(written.empty());
  for (const char* f : {"latency_vs_load.gp", "latency_vs_load.dat", "distributions.gp", "cdf_ttft_0.dat",
                        "cdf_itl_2.dat"})
    EXPECT_TRUE(fs::exists(dir / f)) << f;
}

// An "all at once" run is the highest load: drawn a fifth past the highest finite rate (not at its
// achieved rate, which can be lower), on a tick of its own; SLA lines carry their metric and value;
// legends sit below the panels.
TEST(PlotsTest, AllAtOnceAtTheRightEndAndSlaLinesLabelled) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::path(::testing::TempDir()) / ("plots_all_at_once_" + std::to_string(getpid()));
  fs::remove_all(dir);
  std::vector<PlotRun> runs;
  for (double rate : {4.0, 2.0, 0.0}) {
    PlotRun run;
    run.label = rate > 0 ? std::to_string(rate) : "all at once";
    run.x = rate > 0 ? rate : 3.0;  // its achieved rate: below the highest offered one
    run.all_at_once = rate == 0;
    run.report.ttft_ms.p99 = 100 + rate;
    run.samples.ttft = {1, 2};
    run.samples.tpot = run.samples.itl = run.samples.e2e = run.samples.ttft;
    runs.push_back(run);
  }
  SlaLimits sla;
  sla.ttft_p99_ms = 150;
  PlotOptions options;
  options.dir = dir.string();
  options.gnuplot = "/nonexistent/gnuplot";
  std::vector<std::string> written;
  EXPECT_FALSE(WritePlots(options, runs, sla, &written).ok());
  std::ifstream data(dir / "latency_vs_load.dat");
  std::string header, line;
  std::getline(data, header);
  std::vector<double> xs;
  while (std::getline(data, line)) xs.push_back(std::stod(line.substr(0, line.find(' '))));
  EXPECT_EQ(xs, (std::vector<double>{2.0, 4.0, 4.8}));
  std::ifstream gp(dir / "latency_vs_load.gp");
  const std::string script((std::istreambuf_iterator<char>(gp)), {});
  EXPECT_NE(script.find("set xtics add ('all at once' 4.8)"), std::string::npos) << script;
  EXPECT_NE(script.find("title 'SLA: P99 TTFT <= 150 ms'"), std::string::npos) << script;
  EXPECT_NE(script.find("set label 'SLA: P99 TTFT <= 150 ms'"), std::string::npos) << script;
  EXPECT_NE(script.find("set key below"), std::string::npos);
  EXPECT_EQ(script.find("set key top left"), std::string::npos);
}

}  // namespace
}  // namespace llm::loadtest
