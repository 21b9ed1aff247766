// WritePlots without a working gnuplot: the status says so, and both plots' data and scripts are
// still written (the GPU machines have no gnuplot; their plots are drawn afterwards elsewhere).
#include "server/loadtest/plots.h"

#include <filesystem>

#include "gtest/gtest.h"

namespace llm::loadtest {
namespace {

TEST(PlotsTest, ScriptsAndDataWrittenWhenGnuplotIsMissing) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::path(::testing::TempDir()) / "plots_without_gnuplot";
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

}  // namespace
}  // namespace llm::loadtest
