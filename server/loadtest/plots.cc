#include "server/loadtest/plots.h"

#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"

namespace llm::loadtest {
namespace {

constexpr int kMaxCdfRuns = 6;
constexpr int kMaxCdfPoints = 500;

std::string Quote(const std::string& s) {
  return absl::StrCat("'", absl::StrReplaceAll(s, {{"'", "''"}}), "'");
}

std::string ShellQuote(const std::string& s) {
  return absl::StrCat("'", absl::StrReplaceAll(s, {{"'", "'\\''"}}), "'");
}

std::string Terminal(const std::string& format) {
  return format == "png"
             ? "set terminal pngcairo size 1200,900 noenhanced font 'sans,10' background '#ffffff'\n"
             : "set terminal svg size 1200,900 dynamic noenhanced font 'sans,12' background '#ffffff'\n";
}

// A panel: its title and the plot command that draws it.
struct Panel {
  std::string title, xlabel, ylabel, extra, plot;
};

std::string MultiplotScript(const PlotOptions& options, const std::string& stem,
                            const std::vector<Panel>& panels) {
  const std::string output = absl::StrCat(stem, ".", options.format);
  const int cols = panels.size() > 1 ? 2 : 1;
  const int rows = static_cast<int>((panels.size() + 1) / 2);
  std::string s = absl::StrCat(
      Terminal(options.format), "set output ", Quote(output), "\n",
      absl::StrFormat("set multiplot layout %d,%d title %s\n", rows, cols, Quote(options.title)), "");
  for (const Panel& p : panels) {
    // Legends below the panel, never over the data.
    absl::StrAppend(&s, "reset\nset grid\nset key below horizontal box\nset style data linespoints\n",
                    "set title ", Quote(p.title), "\nset xlabel ", Quote(p.xlabel), "\nset ylabel ",
                    Quote(p.ylabel), "\n", p.extra, "plot ", p.plot, "\n");
  }
  absl::StrAppend(&s, "unset multiplot\n");
  return s;
}

// The SLA limit as a dashed line when it is near the data (up to 2x its largest value);
// otherwise a note in the panel's title, so that the data is not squashed at the bottom.
void AddSla(const std::optional<SlaLimits>& sla, std::optional<double> SlaLimits::*limit, const char* metric,
            double data_max, Panel* panel) {
  if (!sla || !((*sla).*limit)) return;
  const double value = *((*sla).*limit);
  if (value <= 2 * data_max) {
    const std::string name = absl::StrFormat("SLA: P99 %s <= %g ms", metric, value);
    absl::StrAppendFormat(&panel->plot, ", %g with lines dashtype 2 linewidth 2 linecolor rgb 'red' title %s", value,
                          Quote(name));
    // Named on the line itself too, so that it reads without the legend.
    absl::StrAppendFormat(&panel->extra, "set label %s at graph 0.02, first %g offset 0,0.7 textcolor rgb 'red'\n",
                          Quote(name), value);
  } else {
    absl::StrAppendFormat(&panel->title, " (SLA P99 limit %g ms, off the scale)", value);
  }
}

// A curve of column `column` against column 1, with points at the load levels.
std::string Curve(const std::string& file, int column, const std::string& title,
                  const std::string& axes = "") {
  return absl::StrFormat("%s using 1:%d with linespoints pointtype 7 pointsize 0.6 linewidth 2 %s title %s",
                         file, column, axes, Quote(title));
}

void WriteCdf(const std::string& path, const std::vector<double>& sorted) {
  std::ofstream out(path);
  const size_t n = sorted.size();
  const size_t points = std::min<size_t>(n, kMaxCdfPoints);
  for (size_t k = 0; k < points; ++k) {
    const size_t i = points == 1 ? n - 1 : k * (n - 1) / (points - 1);
    out << absl::StrFormat("%.6g %.6g\n", sorted[i], static_cast<double>(i + 1) / static_cast<double>(n));
  }
}

// Up to kMaxCdfRuns runs, evenly spread over `runs` (sorted by x), first and last included.
std::vector<const PlotRun*> PickRuns(const std::vector<const PlotRun*>& runs) {
  if (runs.size() <= kMaxCdfRuns) return runs;
  std::vector<const PlotRun*> picked;
  for (int k = 0; k < kMaxCdfRuns; ++k) picked.push_back(runs[k * (runs.size() - 1) / (kMaxCdfRuns - 1)]);
  return picked;
}

absl::Status RunGnuplot(const PlotOptions& options, const std::string& script) {
  const std::string command =
      absl::StrCat("cd ", ShellQuote(options.dir), " && ", options.gnuplot, " ", ShellQuote(script), " 2>&1");
  const int rc = std::system(command.c_str());
  if (rc == -1 || !WIFEXITED(rc) || WEXITSTATUS(rc) != 0) {
    const int code = WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
    return absl::FailedPreconditionError(
        absl::StrCat("'", options.gnuplot, " ", script, "' failed (exit ", code,
                     code == 127 ? ": gnuplot not found; install gnuplot-nox" : "",
                     "); data and scripts are in ", options.dir));
  }
  return absl::OkStatus();
}

std::string LoadAxisLabel(const std::vector<const PlotRun*>& runs) {
  const bool closed =
      std::any_of(runs.begin(), runs.end(), [](const PlotRun* r) { return r->report.mode == "closed-loop"; });
  return closed ? "achieved load (req/s)" : "offered load (req/s)";
}

// Where "all at once" runs are drawn: a fifth past the highest finite load (0: there are none).
double AllAtOnceX(const std::vector<const PlotRun*>& runs) {
  double finite_max = 0;
  bool any_all = false;
  for (const PlotRun* r : runs) {
    if (r->all_at_once) {
      any_all = true;
    } else {
      finite_max = std::max(finite_max, r->x);
    }
  }
  if (!any_all) return 0;
  return finite_max > 0 ? finite_max * 1.2 : 1;
}

absl::Status LatencyVsLoad(const PlotOptions& options, const std::vector<const PlotRun*>& runs,
                           const std::optional<SlaLimits>& sla, std::vector<std::string>* written) {
  namespace fs = std::filesystem;
  const double all_at_once_x = AllAtOnceX(runs);
  {
    std::ofstream out(fs::path(options.dir) / "latency_vs_load.dat");
    out << "# x ttft_p50 ttft_p90 ttft_p99 tpot_p50 tpot_p90 tpot_p99 itl_p50 itl_p99 e2e_p50 e2e_p90 "
           "e2e_p99 "
           "req_per_s out_tok_per_s goodput_req_per_s\n";
    for (const PlotRun* r : runs) {
      const RunReport& p = r->report;
      out << absl::StrFormat("%.6g %.6g %.6g %.6g %.6g %.6g %.6g %.6g %.6g %.6g %.6g %.6g %.6g %.6g %.6g\n",
                             r->all_at_once ? all_at_once_x : r->x, p.ttft_ms.p50, p.ttft_ms.p90, p.ttft_ms.p99, p.tpot_ms.p50, p.tpot_ms.p90,
                             p.tpot_ms.p99, p.itl_ms.p50, p.itl_ms.p99, p.e2e_ms.p50, p.e2e_ms.p90,
                             p.e2e_ms.p99, p.request_throughput, p.output_token_throughput, p.goodput_rps);
    }
  }
  const std::string x = LoadAxisLabel(runs), d = "'latency_vs_load.dat'";
  // One load level (or several at the same x): a range around it, as gnuplot cannot pick one.
  std::string yzero = "set yrange [0:*]\n";
  double x_min = 0, x_max = 0;
  bool any = false;
  for (const PlotRun* r : runs) {
    if (r->all_at_once) continue;
    x_min = any ? std::min(x_min, r->x) : r->x;
    x_max = any ? std::max(x_max, r->x) : r->x;
    any = true;
  }
  if (all_at_once_x > 0) {
    // The unbounded rate is the highest load: past the others, on a tick of its own.
    yzero += absl::StrFormat("set xrange [%g:%g]\nset xtics add ('all at once' %g)\n", any ? x_min * 0.9 : 0,
                             all_at_once_x * 1.08, all_at_once_x);
  } else if (x_min == x_max) {
    const double pad = x_min > 0 ? x_min * 0.5 : 1;
    yzero += absl::StrFormat("set xrange [%g:%g]\n", x_min - pad, x_min + pad);
  }
  double ttft_max = 0, tpot_max = 0, e2e_max = 0;
  for (const PlotRun* r : runs) {
    ttft_max = std::max(ttft_max, r->report.ttft_ms.p99);
    tpot_max = std::max({tpot_max, r->report.tpot_ms.p99, r->report.itl_ms.p99});
    e2e_max = std::max(e2e_max, r->report.e2e_ms.p99);
  }
  Panel ttft{"Time to first token", x, "ms", yzero,
             absl::StrJoin({Curve(d, 2, "P50"), Curve("''", 3, "P90"), Curve("''", 4, "P99")}, ", ")};
  AddSla(sla, &SlaLimits::ttft_p99_ms, "TTFT", ttft_max, &ttft);
  Panel tpot{"Time per output token, inter-token latency", x, "ms", yzero,
             absl::StrJoin({Curve(d, 5, "TPOT P50"), Curve("''", 6, "TPOT P90"), Curve("''", 7, "TPOT P99"),
                            Curve("''", 9, "ITL P99")},
                           ", ")};
  AddSla(sla, &SlaLimits::tpot_p99_ms, "TPOT", tpot_max, &tpot);
  Panel e2e{"End-to-end latency", x, "ms", yzero,
            absl::StrJoin({Curve(d, 10, "P50"), Curve("''", 11, "P90"), Curve("''", 12, "P99")}, ", ")};
  AddSla(sla, &SlaLimits::e2e_p99_ms, "E2E", e2e_max, &e2e);
  std::vector<std::string> throughput = {Curve(d, 13, "completed req/s")};
  if (sla) throughput.push_back(Curve("''", 15, "goodput (req/s within SLA)"));
  throughput.push_back(Curve("''", 14, "output tok/s", "axes x1y2"));
  std::vector<Panel> panels = {
      ttft,
      tpot,
      e2e,
      {"Throughput", x, "req/s",
       yzero + "set y2range [0:*]\nset y2label 'output tok/s'\nset ytics nomirror\nset y2tics\n",
       absl::StrJoin(throughput, ", ")}};
  const std::string script = "latency_vs_load.gp";
  std::ofstream(fs::path(options.dir) / script) << MultiplotScript(options, "latency_vs_load", panels);
  if (absl::Status s = RunGnuplot(options, script); !s.ok()) return s;
  written->push_back((fs::path(options.dir) / absl::StrCat("latency_vs_load.", options.format)).string());
  return absl::OkStatus();
}

absl::Status Distributions(const PlotOptions& options, const std::vector<const PlotRun*>& runs,
                           std::vector<std::string>* written) {
  namespace fs = std::filesystem;
  struct Metric {
    const char* name;
    const char* title;
    std::vector<double> RunSamples::*samples;
  };
  const Metric metrics[] = {{"ttft", "Time to first token (CDF)", &RunSamples::ttft},
                            {"tpot", "Time per output token (CDF)", &RunSamples::tpot},
                            {"itl", "Inter-token latency (CDF)", &RunSamples::itl},
                            {"e2e", "End-to-end latency (CDF)", &RunSamples::e2e}};
  std::vector<Panel> panels;
  for (const Metric& m : metrics) {
    std::vector<std::string> curves;
    double x_max = 0;
    for (size_t i = 0; i < runs.size(); ++i) {
      const std::vector<double>& v = runs[i]->samples.*m.samples;
      if (v.empty()) continue;
      const std::string file = absl::StrCat("cdf_", m.name, "_", i, ".dat");
      WriteCdf((fs::path(options.dir) / file).string(), v);
      curves.push_back(
          absl::StrCat(Quote(file), " using 1:2 with steps linewidth 2 title ", Quote(runs[i]->label)));
      x_max = std::max(x_max, Percentile(v, 99.9));
    }
    if (curves.empty()) continue;
    const bool itl = m.samples == &RunSamples::itl;
    // Inter-token gaps have a long thin tail (a prefill batched in): cut the axis at P99.9.
    std::string extra = "set yrange [0:1]\n";
    std::string title = m.title;
    if (itl && x_max > 0) {
      extra += absl::StrFormat("set xrange [0:%g]\n", x_max * 1.05);
      title += ", to P99.9";
    }
    panels.push_back({title, "ms", itl ? "fraction of tokens" : "fraction of requests", extra,
                      absl::StrJoin(curves, ", ")});
  }
  if (panels.empty()) return absl::OkStatus();
  const std::string script = "distributions.gp";
  std::ofstream(fs::path(options.dir) / script) << MultiplotScript(options, "distributions", panels);
  if (absl::Status s = RunGnuplot(options, script); !s.ok()) return s;
  written->push_back((fs::path(options.dir) / absl::StrCat("distributions.", options.format)).string());
  return absl::OkStatus();
}

}  // namespace

RunSamples CollectSamples(const RunResult& result) {
  RunSamples s;
  for (const RequestRecord& r : result.records) {
    if (!r.ok() || r.output_tokens == 0) continue;
    s.ttft.push_back(r.ttft_ms());
    if (r.output_tokens > 1) s.tpot.push_back(r.tpot_ms());
    s.itl.insert(s.itl.end(), r.itl_ms.begin(), r.itl_ms.end());
    s.e2e.push_back(r.e2e_ms());
  }
  for (auto* v : {&s.ttft, &s.tpot, &s.itl, &s.e2e}) std::sort(v->begin(), v->end());
  return s;
}

absl::Status WritePlots(const PlotOptions& options, const std::vector<PlotRun>& runs,
                        const std::optional<SlaLimits>& sla, std::vector<std::string>* written) {
  std::error_code ec;
  std::filesystem::create_directories(options.dir, ec);
  if (ec)
    return absl::InvalidArgumentError(
        absl::StrCat("cannot create --plot-dir ", options.dir, ": ", ec.message()));
  std::vector<const PlotRun*> sorted;
  for (const PlotRun& r : runs) sorted.push_back(&r);
  std::stable_sort(sorted.begin(), sorted.end(),
                   [](const PlotRun* a, const PlotRun* b) {
                     return std::pair(a->all_at_once, a->x) < std::pair(b->all_at_once, b->x);
                   });
  if (sorted.empty()) return absl::OkStatus();
  // Both plots' data and scripts are written even when gnuplot fails (e.g. not installed: the
  // scripts can be drawn later elsewhere); the first failure is returned.
  absl::Status first = LatencyVsLoad(options, sorted, sla, written);
  absl::Status second = Distributions(options, PickRuns(sorted), written);
  return first.ok() ? second : first;
}

}  // namespace llm::loadtest
