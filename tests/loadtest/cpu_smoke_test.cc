// The CPU smoke scenario end to end: benchmarks/loadtest/cpu_smoke.sh starts a real `llm serve`
// on a tiny model (with a tokenizer, so dataset prompts go as text), runs `llm loadtest` three ways
// and stops the server; this test checks that the reports are consistent: counts add up,
// percentiles are ordered, throughput is tokens over duration, no errors, plots drawn. Not speed.
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/server/server_process.h"

namespace llm::loadtest {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

json ReadJson(const fs::path& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << path;
  return json::parse(in, nullptr, /*allow_exceptions=*/false);
}

void ExpectOrdered(const json& s, const std::string& what) {
  SCOPED_TRACE(what);
  if (s["count"].get<int64_t>() == 0) return;
  EXPECT_LE(s["min"].get<double>(), s["p50"].get<double>());
  EXPECT_LE(s["p50"].get<double>(), s["p90"].get<double>());
  EXPECT_LE(s["p90"].get<double>(), s["p99"].get<double>());
  EXPECT_LE(s["p99"].get<double>(), s["max"].get<double>());
  EXPECT_LE(s["min"].get<double>(), s["mean"].get<double>());
  EXPECT_LE(s["mean"].get<double>(), s["max"].get<double>());
  EXPECT_GE(s["min"].get<double>(), 0);
}

// One run of a report: every consistency the report promises.
void CheckRun(const json& run, const json& config) {
  SCOPED_TRACE(run["label"].get<std::string>());
  const json& req = run["requests"];
  const int64_t completed = req["completed"], failed = req["failed"], total = req["total"];
  EXPECT_EQ(total, completed + failed);
  int64_t by_status = 0;
  for (const auto& [name, count] : req["errors"].items()) by_status += count.get<int64_t>();
  EXPECT_EQ(by_status, failed);
  EXPECT_EQ(failed, 0) << req.dump();
  EXPECT_EQ(total, config["num_requests"].get<int64_t>());
  EXPECT_EQ(run["load"]["warmup_requests"], config["warmup_requests"]);
  EXPECT_FALSE(run["interrupted"].get<bool>());
  int64_t finished = 0;
  for (const auto& [reason, count] : req["finish_reasons"].items()) finished += count.get<int64_t>();
  EXPECT_EQ(finished, completed);

  const json& tok = run["tokens"];
  const int64_t output = tok["output"];
  EXPECT_EQ(output, tok["expected_output"].get<int64_t>());  // EOS ignored: every request its length
  EXPECT_EQ(tok["count_mismatches"], 0);
  EXPECT_GT(tok["prompt"].get<int64_t>(), 0);

  const json& lat = run["latency_ms"];
  for (const char* m : {"ttft", "tpot", "itl", "e2e", "server_queue"}) ExpectOrdered(lat[m], m);
  ExpectOrdered(run["generator"]["send_lag_ms"], "send_lag");
  EXPECT_EQ(lat["ttft"]["count"], completed);
  EXPECT_EQ(lat["e2e"]["count"], completed);
  EXPECT_EQ(lat["server_queue"]["count"], completed);
  EXPECT_EQ(lat["itl"]["count"].get<int64_t>(), output - completed);  // n - 1 gaps a request
  EXPECT_LE(lat["tpot"]["count"].get<int64_t>(), completed);
  // TTFT <= E2E for every request, so for every order statistic.
  for (const char* q : {"min", "p50", "p90", "p99", "max"})
    EXPECT_LE(lat["ttft"][q].get<double>(), lat["e2e"][q].get<double>()) << q;

  const double duration = run["duration_s"];
  EXPECT_GT(duration, 0);
  EXPECT_LE(lat["e2e"]["max"].get<double>() / 1000, duration * (1 + 1e-9));
  const json& tp = run["throughput"];
  EXPECT_NEAR(tp["requests_per_s"].get<double>(), completed / duration, 1e-6 * completed / duration);
  EXPECT_NEAR(tp["output_tokens_per_s"].get<double>(), output / duration, 1e-6 * output / duration);
  EXPECT_NEAR(tp["total_tokens_per_s"].get<double>(), (output + tok["prompt"].get<int64_t>()) / duration,
              1e-6 * tp["total_tokens_per_s"].get<double>());
}

void CheckPlots(const json& report) {
  if (std::system("command -v gnuplot > /dev/null 2>&1") != 0) {
    std::fprintf(stderr, "gnuplot is not installed: plots not checked\n");
    return;
  }
  ASSERT_EQ(report["plots"].size(), 2u);
  for (const json& p : report["plots"]) {
    std::ifstream in(p.get<std::string>());
    const std::string svg((std::istreambuf_iterator<char>(in)), {});
    EXPECT_NE(svg.find("<svg"), std::string::npos) << p;
    EXPECT_GT(svg.size(), 5000u) << p;
  }
}

class CpuSmokeTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    out_dir_ = new fs::path(fs::path(::testing::TempDir()) / absl::StrCat("loadtest_smoke_", getpid()));
    fs::remove_all(*out_dir_);
    const std::string command =
        absl::StrCat("BUILD_DIR='", LLM_BINARY_DIR, "' OUT_DIR='", out_dir_->string(), "' MODEL='",
                     llm::testing::TokenizerModelDir(), "' bash '", LLM_SOURCE_DIR,
                     "/benchmarks/loadtest/cpu_smoke.sh' > '", out_dir_->string(), ".log' 2>&1");
    const int rc = std::system(command.c_str());
    exit_code_ = WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
  }
  static void TearDownTestSuite() {
    fs::remove_all(*out_dir_);
    delete out_dir_;
  }
  static std::string Log() {
    std::ifstream in(out_dir_->string() + ".log");
    return std::string((std::istreambuf_iterator<char>(in)), {});
  }

  static fs::path* out_dir_;
  static int exit_code_;
};
fs::path* CpuSmokeTest::out_dir_ = nullptr;
int CpuSmokeTest::exit_code_ = -1;

TEST_F(CpuSmokeTest, ScenarioRuns) { ASSERT_EQ(exit_code_, 0) << Log(); }

TEST_F(CpuSmokeTest, ClosedLoopSweepIsConsistent) {
  const json r = ReadJson(*out_dir_ / "smoke_sweep.json");
  ASSERT_FALSE(r.is_discarded());
  ASSERT_EQ(r["runs"].size(), 2u);
  EXPECT_EQ(r["runs"][0]["load"]["concurrency"], 1);
  EXPECT_EQ(r["runs"][1]["load"]["concurrency"], 4);
  for (const json& run : r["runs"]) {
    CheckRun(run, r["config"]);
    EXPECT_EQ(run["load"]["mode"], "closed-loop");
  }
  CheckPlots(r);
}

TEST_F(CpuSmokeTest, DatasetRunSendsTextAndIsConsistent) {
  const json r = ReadJson(*out_dir_ / "smoke_dataset.json");
  ASSERT_FALSE(r.is_discarded());
  EXPECT_TRUE(r["model"]["has_tokenizer"].get<bool>());
  EXPECT_NE(r["workload"].get<std::string>().find("dataset: 7 prompts (1 skipped), text"), std::string::npos)
      << r["workload"];
  ASSERT_EQ(r["runs"].size(), 1u);
  const json& run = r["runs"][0];
  CheckRun(run, r["config"]);
  EXPECT_EQ(run["load"]["mode"], "gamma");
  EXPECT_EQ(run["load"]["burstiness"], 0.5);
  // Per-request details add up to the totals.
  const json& detail = run["requests_detail"];
  ASSERT_EQ(detail.size(), run["requests"]["total"].get<size_t>());
  int64_t tokens = 0;
  for (const json& d : detail) {
    EXPECT_EQ(d["status"], "OK");
    tokens += d["output_tokens"].get<int64_t>();
    EXPECT_LE(d["ttft_ms"].get<double>(), d["e2e_ms"].get<double>());
  }
  EXPECT_EQ(tokens, run["tokens"]["output"].get<int64_t>());
}

TEST_F(CpuSmokeTest, SlaSearchIsConsistent) {
  const json r = ReadJson(*out_dir_ / "smoke_sla.json");
  ASSERT_FALSE(r.is_discarded());
  EXPECT_EQ(r["sla"]["ttft_p99_ms"], 2000.0);
  EXPECT_EQ(r["sla"]["tpot_p99_ms"], 200.0);
  const json& s = r["sla_search"];
  ASSERT_TRUE(s["found"].get<bool>()) << s.dump();  // a tiny model meets 2 s / 200 ms easily
  EXPECT_EQ(s["probes"].size(), r["runs"].size());
  double best = 0;
  for (const json& p : s["probes"]) {
    const json& run = r["runs"][p["run"].get<size_t>()];
    CheckRun(run, r["config"]);
    EXPECT_EQ(p["met"], run["sla"]["met"]);
    EXPECT_EQ(p["rate_rps"], run["load"]["offered_rate_rps"]);
    if (p["met"].get<bool>()) best = std::max(best, p["rate_rps"].get<double>());
  }
  EXPECT_EQ(s["max_rate_rps"].get<double>(), best);
  const json& best_run = r["runs"][s["best_run"].get<size_t>()];
  EXPECT_TRUE(best_run["sla"]["met"].get<bool>());
  EXPECT_EQ(s["goodput_rps"], best_run["sla"]["goodput_rps"]);
  EXPECT_LE(best_run["sla"]["goodput_rps"].get<double>(),
            best_run["throughput"]["requests_per_s"].get<double>());
  CheckPlots(r);
}

// Exit codes: 2 for bad usage, 1 when the server cannot be reached.
TEST(LoadtestCommandTest, BadUsageAndUnreachableServer) {
  const auto run = [](const std::string& args) {
    const std::string command = absl::StrCat(LLM_BINARY_DIR, "/bin/llm loadtest ", args, " > /dev/null 2>&1");
    const int rc = std::system(command.c_str());
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
  };
  EXPECT_EQ(run("--help"), 0);
  EXPECT_EQ(run("--rate -1 --num-requests 1"), 2);
  EXPECT_EQ(run("--rate 1"), 2);          // neither a count nor a duration
  EXPECT_EQ(run("--num-requests 5"), 2);  // no load
  EXPECT_EQ(run("--rate 1,2 --concurrency 1,2 --num-requests 1"), 2);
  EXPECT_EQ(run("--sla-search --num-requests 1"), 2);  // no limits
  EXPECT_EQ(run("--input-len uniform:9:3 --rate 1 --num-requests 1"), 2);
  EXPECT_EQ(run("--sla-ttft-p99 fast --rate 1 --num-requests 1"), 2);
  // Port 1 on localhost: nothing listens there.
  EXPECT_EQ(run("--target 127.0.0.1:1 --connect-timeout 1 --rate 1 --num-requests 1"), 1);
}

}  // namespace
}  // namespace llm::loadtest
