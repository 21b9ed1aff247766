#include "server/loadtest/loadtest.h"

#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "kernels/core/status.h"
#include "nlohmann/json.hpp"
#include "server/loadtest/load_runner.h"
#include "server/loadtest/openai_target.h"
#include "server/loadtest/plots.h"
#include "server/loadtest/progress_line.h"
#include "server/loadtest/report_printer.h"
#include "server/loadtest/run_report.h"
#include "server/loadtest/signal_stopper.h"
#include "server/loadtest/target.h"
#include "server/loadtest/workload.h"

namespace llm::loadtest {
namespace {

using json = nlohmann::ordered_json;

// Datasets are tokenized through the server up front; in duration mode at most this many entries.
constexpr int64_t kMaxDatasetEntriesForDuration = 20000;

std::string RateLabel(double rate) {
  return std::isinf(rate) ? "all at once" : absl::StrFormat("%.4g req/s", rate);
}

absl::Status Validate(const LoadtestConfig& c) {
  if (c.backend != "grpc" && c.backend != "openai" && c.backend != "openai-chat")
    return absl::InvalidArgumentError("--backend is grpc, openai or openai-chat");
  if (c.num_requests < 0)
    return absl::InvalidArgumentError(absl::StrCat("--num-requests must be >= 0 (0: as many as --duration takes), got ",
                                                   c.num_requests));
  if (c.connections < 1)
    return absl::InvalidArgumentError(absl::StrCat("--connections must be at least 1, got ", c.connections));
  if (c.num_requests == 0 && c.duration <= absl::ZeroDuration())
    return absl::InvalidArgumentError("give --num-requests or --duration");
  if (c.rates.size() > 1 && c.concurrencies.size() > 1)
    return absl::InvalidArgumentError("sweep either --rate or --concurrency, not both");
  if (c.search) {
    if (!c.sla || !c.sla->any())
      return absl::InvalidArgumentError(
          "--sla-search needs limits (--sla-ttft-p99, --sla-tpot-p99, ... or --sla)");
    if (c.concurrencies.size() > 1)
      return absl::InvalidArgumentError("--sla-search takes at most one --concurrency");
  } else if (c.rates.empty() && c.concurrencies.empty()) {
    return absl::InvalidArgumentError("give --rate (open loop), --concurrency (closed loop) or --sla-search");
  }
  for (double r : c.rates)
    if (!(r > 0)) return absl::InvalidArgumentError("--rate values must be positive (inf: all at once)");
  for (int64_t n : c.concurrencies)
    if (n < 1) return absl::InvalidArgumentError("--concurrency values must be at least 1");
  if (c.plot_format != "svg" && c.plot_format != "png")
    return absl::InvalidArgumentError("--plot-format is svg or png");
  if (!(c.burstiness > 0)) return absl::InvalidArgumentError("--burstiness must be positive");
  if (c.warmup_requests < 0) return absl::InvalidArgumentError("--warmup-requests must be >= 0");
  return absl::OkStatus();
}

// Why a search ended, for its result line.
std::string StopNote(const SlaSearchResult& s) {
  if (s.stopped_by == "probe budget")
    return absl::StrFormat(" (stopped after %d probes: raise --sla-max-probes)", s.probes.size());
  if (s.stopped_by == "max rate") return " (every rate up to --sla-max-rate passed)";
  if (s.stopped_by == "min rate") return " (down to --sla-min-rate)";
  return absl::StrFormat(" (%.4g req/s missed it)", s.lowest_failing_rate);
}

class Session {
 public:
  Session(const LoadtestConfig& config, SignalStopper& stopper) : config_(config), stopper_(stopper) {}
  ~Session() { stopper_.OnSignal(nullptr); }

  absl::Status Setup() {
    if (config_.backend == "grpc") {
      ASSIGN_OR_RETURN(target_, Target::Connect(config_.target, config_.connections, config_.connect_timeout,
                                                config_.api_key));
    } else {
      OpenAiTargetOptions o;
      o.url = config_.target;
      o.chat = config_.backend == "openai-chat";
      o.api_key = config_.api_key;
      o.io_threads = config_.connections;
      o.timeout = config_.connect_timeout;
      ASSIGN_OR_RETURN(target_, ConnectOpenAi(o));
    }
    const v1::ModelInfoResponse& m = target_->model_info();
    WorkloadOptions w;
    w.input_len = config_.input_len;
    w.output_len = config_.output_len;
    w.override_output_len = config_.output_len_set;
    w.temperature = config_.temperature;
    w.top_p = config_.top_p;
    w.honor_eos = config_.honor_eos;
    w.seed = config_.seed;
    w.shared_prefix_len = config_.shared_prefix_len;
    w.shared_prefixes = config_.shared_prefixes;
    w.turns = config_.turns;
    w.conversations = config_.conversations;
    if (!config_.dataset_path.empty()) {
      ASSIGN_OR_RETURN(Dataset dataset, LoadDataset(config_.dataset_path));
      w.dataset = std::move(dataset);
      w.max_dataset_entries = config_.num_requests > 0 ? config_.num_requests + config_.warmup_requests
                                                       : kMaxDatasetEntriesForDuration;
    }
    ModelLimits limits{m.vocab_size(), m.context_length(), m.has_tokenizer()};
    ASSIGN_OR_RETURN(workload_,
                     Workload::Create(std::move(w), limits, [this](const std::string& text, bool special) {
                       return target_->CountTokens(text, special);
                     }));
    runner_ = std::make_unique<LoadRunner>(*target_, *workload_);
    stopper_.OnSignal([this] { runner_->Stop(); });
    std::printf("llm loadtest: %s (%s) serving %s (%s, %s, tp %d pp %d, context %lld, %s)\n",
                config_.target.c_str(), config_.backend.c_str(), m.model().c_str(), m.architecture().c_str(), m.device().c_str(),
                m.tensor_parallel_size(), m.pipeline_parallel_size(),
                static_cast<long long>(m.context_length()), m.has_tokenizer() ? "tokenizer" : "no tokenizer");
    std::printf("workload: %s; %s; %d connections\n\n", workload_->Describe().c_str(),
                config_.num_requests > 0
                    ? absl::StrCat(config_.num_requests, " requests per load level (+",
                                   config_.warmup_requests, " warm-up)")
                          .c_str()
                    : absl::StrCat(absl::FormatDuration(config_.duration), " per load level (+",
                                   config_.warmup_requests, " warm-up requests)")
                          .c_str(),
                config_.connections);
    std::fflush(stdout);
    return absl::OkStatus();
  }

  // Runs one load level; returns its index in reports_.
  int Run(const RunPlan& plan, const std::string& label) {
    RunResult result;
    {
      ProgressLine progress([this] { return runner_->Progress(); }, label, config_.progress_interval);
      result = runner_->Run(plan);
    }
    RunReport report = BuildReport(result, config_.sla);
    json j = ToJson(report);
    j["label"] = label;
    if (config_.json_requests) j["requests_detail"] = RecordsJson(result);
    runs_json_.push_back(std::move(j));
    if (!config_.plot_dir.empty()) {
      const bool by_rate = plan.open_loop && !std::isinf(plan.rate);
      plot_runs_.push_back({label, by_rate ? plan.rate : report.request_throughput,
                            plan.open_loop && std::isinf(plan.rate), report, CollectSamples(result)});
    }
    reports_.push_back(std::move(report));
    return static_cast<int>(reports_.size()) - 1;
  }

  RunPlan BasePlan() const {
    RunPlan p;
    p.num_requests = config_.num_requests;
    p.duration = config_.duration;
    p.warmup_requests = config_.warmup_requests;
    p.request_timeout = config_.request_timeout;
    p.burstiness = config_.burstiness;
    p.seed = config_.seed;
    return p;
  }

  RunPlan OpenLoop(double rate) const {
    RunPlan p = BasePlan();
    p.open_loop = true;
    p.rate = rate;
    p.concurrency = config_.concurrencies.size() == 1 ? config_.concurrencies[0] : 0;
    return p;
  }

  absl::Status Sweep() {
    if (!config_.rates.empty()) {
      for (double rate : config_.rates) {
        if (stopper_.signalled()) break;
        const int i = Run(OpenLoop(rate), RateLabel(rate));
        std::printf("%s\n", FormatRunTable(reports_[i]).c_str());
        std::fflush(stdout);
      }
    } else {
      for (int64_t n : config_.concurrencies) {
        if (stopper_.signalled()) break;
        RunPlan p = BasePlan();
        p.open_loop = false;
        p.concurrency = n;
        const int i = Run(p, absl::StrCat(n, " in flight"));
        std::printf("%s\n", FormatRunTable(reports_[i]).c_str());
        std::fflush(stdout);
      }
    }
    if (reports_.size() > 1) std::printf("summary\n%s\n", FormatSummaryTable(reports_).c_str());
    return absl::OkStatus();
  }

  absl::Status Search() {
    SlaSearchOptions options = config_.search_options;
    if (!config_.rates.empty()) options.start_rate = config_.rates.front();
    std::printf("SLA search: %s; highest Poisson rate%s meeting them\n", config_.sla->ToString().c_str(),
                config_.burstiness != 1 ? " (gamma arrivals)" : "");
    std::fflush(stdout);
    auto probe = [&](double rate) -> absl::StatusOr<ProbeOutcome> {
      if (stopper_.signalled()) return absl::CancelledError("interrupted");
      const int i = Run(OpenLoop(rate), RateLabel(rate));
      const RunReport& r = reports_[i];
      std::printf("  probe %-2zu %-12s %s  (%.2f req/s, P99 TTFT %.1f ms, P99 TPOT %.2f ms, %lld failed)\n",
                  reports_.size(), RateLabel(rate).c_str(),
                  r.sla_met ? "met   " : absl::StrCat("missed: ", r.sla_failure).c_str(),
                  r.request_throughput, r.ttft_ms.p99, r.tpot_ms.p99, static_cast<long long>(r.failed));
      std::fflush(stdout);
      return ProbeOutcome{rate, r.sla_met, r.sla_failure, i};
    };
    auto result = SearchMaxRate(options, probe);
    if (!result.ok() && !stopper_.signalled()) return result.status();
    search_ = result.ok() ? std::optional<SlaSearchResult>(*result) : std::nullopt;
    std::printf("\nsummary\n%s\n", FormatSummaryTable(reports_).c_str());
    if (!search_ || !search_->found) {
      std::printf("SLA search: no rate met the SLA%s\n\n",
                  search_ ? StopNote(*search_).c_str() : " (interrupted)");
      return absl::OkStatus();
    }
    const RunReport& best = reports_[search_->best_run_index];
    std::printf("best run\n%s\n", FormatRunTable(best).c_str());
    std::printf(
        "SLA search: max rate meeting the SLA %.4g req/s%s -> goodput %.2f req/s, %.1f output tok/s\n\n",
        search_->best_rate, StopNote(*search_).c_str(), best.goodput_rps, best.output_token_throughput);
    return absl::OkStatus();
  }

  absl::Status WriteOutputs() {
    std::vector<std::string> plots;
    if (!config_.plot_dir.empty() && !plot_runs_.empty()) {
      const v1::ModelInfoResponse& m = target_->model_info();
      PlotOptions options{config_.plot_dir, config_.gnuplot, config_.plot_format,
                          absl::StrCat(m.model(), " (", m.device(), ", tp ", m.tensor_parallel_size(), ")  ",
                                       workload_->Describe())};
      // The measurements matter more than the pictures: a plot failure is a warning.
      if (absl::Status s = WritePlots(options, plot_runs_, config_.sla, &plots); !s.ok())
        std::fprintf(stderr, "llm loadtest: warning: plots not drawn: %s\n",
                     std::string(s.message()).c_str());
      for (const std::string& p : plots) std::printf("plot: %s\n", p.c_str());
    }
    if (!config_.json_out.empty()) {
      std::ofstream out(config_.json_out);
      out << Json(plots).dump(2) << "\n";
      if (!out) return absl::InternalError(absl::StrCat("cannot write ", config_.json_out));
      std::printf("report: %s\n", config_.json_out.c_str());
    }
    return absl::OkStatus();
  }

  bool AllOk() const {
    if (search_) return search_->found;
    for (const RunReport& r : reports_)
      if (r.failed > 0 || r.interrupted || (r.sla_checked && !r.sla_met)) return false;
    return !reports_.empty();
  }

 private:
  static json RecordsJson(const RunResult& result) {
    json a = json::array();
    for (const RequestRecord& r : result.records) {
      a.push_back({{"index", r.index},
                   {"status", StatusCodeName(r.status)},
                   {"prompt_len", r.prompt_len},
                   {"output_tokens", r.output_tokens},
                   {"send_ms", r.send_ns / 1e6},
                   {"lag_ms", (r.send_ns - r.scheduled_ns) / 1e6},
                   {"ttft_ms", r.first_token_ns >= 0 ? json(r.ttft_ms()) : json(nullptr)},
                   {"tpot_ms", r.output_tokens > 1 ? json(r.tpot_ms()) : json(nullptr)},
                   {"e2e_ms", r.e2e_ms()},
                   {"server_queue_ms", r.got_final ? json(r.timings.queue_ms()) : json(nullptr)}});
    }
    return a;
  }

  json Json(const std::vector<std::string>& plots) const {
    const v1::ModelInfoResponse& m = target_->model_info();
    json j = {{"tool", "llm loadtest"},
              {"target", config_.target},
              {"connections", config_.connections},
              {"model",
               {{"name", m.model()},
                {"architecture", m.architecture()},
                {"device", m.device()},
                {"tensor_parallel", m.tensor_parallel_size()},
                {"pipeline_parallel", m.pipeline_parallel_size()},
                {"context_length", m.context_length()},
                {"vocab_size", m.vocab_size()},
                {"has_tokenizer", m.has_tokenizer()},
                {"max_running_requests", m.limits().max_running_requests()},
                {"max_queued_requests", m.limits().max_queued_requests()}}},
              {"workload", workload_->Describe()},
              {"config",
               {{"input_len", config_.input_len.ToString()},
                {"output_len", config_.output_len.ToString()},
                {"dataset", config_.dataset_path},
                {"temperature", config_.temperature},
                {"top_p", config_.top_p},
                {"honor_eos", config_.honor_eos},
                {"num_requests", config_.num_requests},
                {"duration_s", absl::ToDoubleSeconds(config_.duration)},
                {"warmup_requests", config_.warmup_requests},
                {"burstiness", config_.burstiness},
                {"seed", config_.seed}}},
              {"sla", config_.sla ? ToJson(*config_.sla) : json(nullptr)},
              {"runs", runs_json_},
              {"plots", plots}};
    if (search_) {
      json probes = json::array();
      for (const ProbeOutcome& p : search_->probes)
        probes.push_back({{"rate_rps", p.rate}, {"met", p.passed}, {"failure", p.why}, {"run", p.run_index}});
      json s = {{"found", search_->found},
                {"max_rate_rps", search_->best_rate},
                {"lowest_failing_rate_rps", search_->lowest_failing_rate},
                {"best_run", search_->best_run_index},
                {"stopped_by", search_->stopped_by},
                {"probes", probes}};
      if (search_->found) {
        const RunReport& best = reports_[search_->best_run_index];
        s["goodput_rps"] = best.goodput_rps;
        s["request_throughput_rps"] = best.request_throughput;
        s["output_tokens_per_s"] = best.output_token_throughput;
      }
      j["sla_search"] = s;
    }
    return j;
  }

  const LoadtestConfig& config_;
  SignalStopper& stopper_;
  std::unique_ptr<Target> target_;
  std::unique_ptr<Workload> workload_;
  std::unique_ptr<LoadRunner> runner_;
  std::vector<RunReport> reports_;
  std::vector<PlotRun> plot_runs_;
  json runs_json_ = json::array();
  std::optional<SlaSearchResult> search_;
};

}  // namespace

absl::Status RunLoadtest(const LoadtestConfig& config, bool* all_ok) {
  *all_ok = false;
  RETURN_IF_ERROR(Validate(config));
  SignalStopper stopper;  // before gRPC starts its threads
  Session session(config, stopper);
  RETURN_IF_ERROR(session.Setup());
  RETURN_IF_ERROR(config.search ? session.Search() : session.Sweep());
  RETURN_IF_ERROR(session.WriteOutputs());
  *all_ok = session.AllOk();
  return absl::OkStatus();
}

}  // namespace llm::loadtest
