// llm loadtest: a load generator for `llm serve` (see server/loadtest/loadtest.h). Flags are read
// here and passed down as a LoadtestConfig.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <tuple>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "server/cli/commands.h"
#include "server/cli/flags.h"
#include "server/loadtest/loadtest.h"

namespace llm::cli {
namespace {

int Fail(const absl::Status& status, int code) {
  std::fprintf(stderr, "llm loadtest: %s\n", std::string(status.message()).c_str());
  return code;
}

// "60s", "5m", "1h30m", or a bare number of seconds.
absl::StatusOr<absl::Duration> ParseSeconds(const std::string& flag, const std::string& text) {
  double s;
  if (absl::SimpleAtod(text, &s) && std::isfinite(s) && s >= 0) return absl::Seconds(s);
  absl::Duration d;
  if (absl::ParseDuration(text, &d) && d >= absl::ZeroDuration()) return d;
  return absl::InvalidArgumentError(
      absl::StrCat("--", flag, ": bad duration '", text, "' (e.g. 60s, 5m, 90)"));
}

absl::StatusOr<std::vector<double>> ParseRates(const std::string& text) {
  std::vector<double> rates;
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipWhitespace())) {
    double r;
    if (part == "inf") {
      r = std::numeric_limits<double>::infinity();
    } else if (!absl::SimpleAtod(part, &r) || !(r > 0)) {
      return absl::InvalidArgumentError(absl::StrCat("--rate: bad rate '", std::string(part), "'"));
    }
    rates.push_back(r);
  }
  return rates;
}

absl::StatusOr<std::vector<int64_t>> ParseCounts(const std::string& text) {
  std::vector<int64_t> counts;
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipWhitespace())) {
    int64_t n;
    if (!absl::SimpleAtoi(part, &n) || n < 1)
      return absl::InvalidArgumentError(absl::StrCat("--concurrency: bad value '", std::string(part), "'"));
    counts.push_back(n);
  }
  return counts;
}

struct RawFlags {
  std::string rate, concurrency, input_len = "128", output_len = "128", duration = "0",
                                 request_timeout = "600", progress_interval = "1", connect_timeout = "30";
  std::string sla, sla_ttft, sla_tpot, sla_itl, sla_e2e;
  int64_t connections = 4, seed = 1, max_probes = 16;
};

// Flags -> config; the flags that need parsing beyond FlagSet's types.
absl::Status Finish(const FlagSet& flags, const RawFlags& raw, loadtest::LoadtestConfig& c) {
  c.connections = static_cast<int>(raw.connections);
  c.seed = static_cast<uint64_t>(raw.seed);
  c.search_options.max_probes = static_cast<int>(raw.max_probes);
  auto in = loadtest::LengthDistribution::Parse(raw.input_len);
  if (!in.ok()) return absl::InvalidArgumentError(absl::StrCat("--input-len: ", in.status().message()));
  c.input_len = *in;
  auto out = loadtest::LengthDistribution::Parse(raw.output_len);
  if (!out.ok()) return absl::InvalidArgumentError(absl::StrCat("--output-len: ", out.status().message()));
  c.output_len = *out;
  c.output_len_set = flags.IsSet("output-len");
  if (!raw.rate.empty()) {
    auto rates = ParseRates(raw.rate);
    if (!rates.ok()) return rates.status();
    c.rates = *rates;
  }
  if (!raw.concurrency.empty()) {
    auto counts = ParseCounts(raw.concurrency);
    if (!counts.ok()) return counts.status();
    c.concurrencies = *counts;
  }
  for (auto [flag, text, out_duration] :
       {std::tuple{"duration", &raw.duration, &c.duration},
        std::tuple{"request-timeout", &raw.request_timeout, &c.request_timeout},
        std::tuple{"progress-interval", &raw.progress_interval, &c.progress_interval},
        std::tuple{"connect-timeout", &raw.connect_timeout, &c.connect_timeout}}) {
    auto d = ParseSeconds(flag, *text);
    if (!d.ok()) return d.status();
    *out_duration = *d;
  }
  loadtest::SlaLimits sla;
  if (!raw.sla.empty()) {
    auto preset = loadtest::SlaPreset(raw.sla);
    if (!preset.ok()) return preset.status();
    sla = *preset;
  }
  for (auto [flag, text, limit] : {std::tuple{"sla-ttft-p99", &raw.sla_ttft, &sla.ttft_p99_ms},
                                   std::tuple{"sla-tpot-p99", &raw.sla_tpot, &sla.tpot_p99_ms},
                                   std::tuple{"sla-itl-p99", &raw.sla_itl, &sla.itl_p99_ms},
                                   std::tuple{"sla-e2e-p99", &raw.sla_e2e, &sla.e2e_p99_ms}}) {
    if (text->empty()) continue;
    auto ms = loadtest::ParseMilliseconds(*text);
    if (!ms.ok()) return absl::InvalidArgumentError(absl::StrCat("--", flag, ": ", ms.status().message()));
    *limit = *ms;
  }
  if (sla.any()) c.sla = sla;
  if (!(c.top_p > 0 && c.top_p <= 1))
    return absl::InvalidArgumentError(absl::StrCat("--top-p: ", c.top_p, " is not in (0, 1]"));
  return absl::OkStatus();
}

}  // namespace

int RunLoadtest(int argc, char** argv) {
  FlagSet flags(
      "loadtest",
      "Load-tests an `llm serve` server over its gRPC API (streamed Generate calls), or any OpenAI-compatible\n"
      "server over HTTP (--backend openai: streamed /v1/completions; openai-chat: /v1/chat/completions): open-loop Poisson or\n"
      "bursty arrivals (--rate) or closed-loop concurrency (--concurrency), synthetic or dataset prompts;\n"
      "reports TTFT, TPOT, inter-token latency, end-to-end latency (P50/P90/P99/max), throughput and "
      "errors.\n"
      "Several comma-separated --rate or --concurrency values sweep the load; --sla-search finds the\n"
      "highest rate meeting SLA limits. Exit 0 when every request succeeded (and the SLA was met).\n\n"
      "  llm loadtest --target localhost:50051 --rate 4 --num-requests 500 --input-len 1000 --output-len "
      "1000\n"
      "  llm loadtest --concurrency 1,8,32 --duration 60s --dataset sharegpt.json --plot-dir plots\n"
      "  llm loadtest --sla mlperf-llama2-70b --sla-search --num-requests 300 --json-out report.json\n"
      "  llm loadtest --backend openai --target http://localhost:8000 --concurrency 64 --num-requests 500");
  loadtest::LoadtestConfig c;
  RawFlags raw;
  double max_error_rate = 0;
  flags.String("backend", &c.backend, "grpc, openai (/v1/completions over HTTP) or openai-chat (/v1/chat/completions)");
  flags.String("target", &c.target, "the server: HOST:PORT for grpc, http://HOST:PORT for openai");
  flags.String("server", &c.target, "the same as --target (the clients' name for it)");
  flags.String("api-key", &c.api_key, "the server's --api-key (default: the LLM_API_KEY environment variable)");
  flags.String("connect-timeout", &raw.connect_timeout,
               "seconds to wait for the server (and its model) at start");
  flags.Int("connections", &raw.connections,
            "gRPC connections (HTTP/2) the calls are spread over; openai: the client's I/O threads");
  flags.String("rate", &raw.rate, "open loop: requests/s, comma-separated to sweep; 'inf' sends all at once");
  flags.String("rates", &raw.rate, "the same as --rate");
  flags.Float("burstiness", &c.burstiness, "gamma shape of inter-arrival gaps: 1 Poisson, < 1 bursty");
  flags.String("concurrency", &raw.concurrency,
               "closed loop: requests in flight, comma-separated to sweep (with --rate: a cap on in flight)");
  flags.Int("num-requests", &c.num_requests, "measured requests per load level (or --duration)");
  flags.String("duration", &raw.duration, "measure each load level this long instead (e.g. 60s, 5m)");
  flags.Int("warmup-requests", &c.warmup_requests, "requests sent first at each load level and not measured");
  flags.String("input-len", &raw.input_len,
               "prompt tokens: N, uniform:LO:HI, normal:MEAN:STD or lognormal:MEDIAN:SIGMA[:MAX]");
  flags.String("output-len", &raw.output_len,
               "output tokens (max_tokens, EOS ignored), same forms as --input-len");
  flags.String(
      "dataset", &c.dataset_path,
      "JSONL or JSON prompts: {\"prompt\",\"output_len\"}, ShareGPT \"conversations\", \"messages\"");
  flags.Float("temperature", &c.temperature, "sampling temperature (0: greedy)");
  flags.Float("top-p", &c.top_p, "nucleus sampling: the requests' top_p (1: off; chat models' defaults are 0.9-0.95)");
  flags.Int("shared-prefix-len", &c.shared_prefix_len,
            "synthetic: every prompt starts with one of --shared-prefixes fixed random prefixes of this many tokens");
  flags.Int("shared-prefixes", &c.shared_prefixes, "distinct shared prefixes (with --shared-prefix-len)");
  flags.Int("turns", &c.turns,
            "synthetic multi-turn conversations: each turn resends the history (earlier prompts and output-length "
            "stand-ins for the answers) plus --input-len new tokens; TTFT is reported per turn");
  flags.Int("conversations", &c.conversations, "conversations replayed round-robin (with --turns)");
  flags.Bool("honor-eos", &c.honor_eos,
             "stop at the model's EOS (default: ignore it, outputs have their length)");
  flags.String("request-timeout", &raw.request_timeout, "gRPC deadline of each request (seconds or 10m)");
  flags.Int("seed", &raw.seed, "seed of the arrivals, lengths and prompts");
  flags.String("sla", &raw.sla,
               "SLA preset: mlperf-llama2-70b (2 s / 200 ms) or mlperf-llama2-70b-interactive (450/40 ms)");
  flags.String("sla-ttft-p99", &raw.sla_ttft, "P99 TTFT limit (e.g. 2s, 450ms)");
  flags.String("sla-tpot-p99", &raw.sla_tpot, "P99 TPOT limit (e.g. 200ms)");
  flags.String("sla-itl-p99", &raw.sla_itl, "P99 inter-token latency limit");
  flags.String("sla-e2e-p99", &raw.sla_e2e, "P99 end-to-end latency limit");
  flags.Float("sla-max-error-rate", &max_error_rate, "fraction of failed requests a load level may have");
  flags.Bool("sla-search", &c.search,
             "search the highest Poisson rate meeting the SLA (bracket, then bisection)");
  flags.Float("sla-start-rate", &c.search_options.start_rate, "first rate the search probes (req/s)");
  flags.Float("sla-min-rate", &c.search_options.min_rate, "lowest rate the search probes");
  flags.Float("sla-max-rate", &c.search_options.max_rate, "highest rate the search probes");
  flags.Float("sla-tolerance", &c.search_options.rel_tolerance,
              "bisect until the bracket is this fraction of the rate");
  flags.Int("sla-max-probes", &raw.max_probes, "most load levels the search runs");
  flags.String("json-out", &c.json_out, "write the report as JSON here");
  flags.Bool("json-requests", &c.json_requests, "include every request's measurements in the JSON");
  flags.String("plot-dir", &c.plot_dir, "write latency-vs-load and latency-distribution plots (SVG) here");
  flags.String("plot-format", &c.plot_format, "svg or png");
  flags.String("gnuplot", &c.gnuplot, "the gnuplot program");
  flags.String("progress-interval", &raw.progress_interval,
               "seconds between progress lines on stderr (0: none)");
  if (auto exit_code = HandleParse(flags, argc, argv)) return *exit_code;
  if (absl::Status s = Finish(flags, raw, c); !s.ok()) return Fail(s, 2);
  if (!flags.IsSet("target") && !flags.IsSet("server") && c.backend != "grpc") c.target = "http://localhost:8000";
  if (c.api_key.empty())
    if (const char* key = std::getenv("LLM_API_KEY")) c.api_key = key;
  if (c.sla) c.sla->max_error_rate = max_error_rate;
  bool all_ok = false;
  if (absl::Status s = loadtest::RunLoadtest(c, &all_ok); !s.ok())
    return Fail(s, s.code() == absl::StatusCode::kInvalidArgument ? 2 : 1);
  return all_ok ? 0 : 1;
}

}  // namespace llm::cli
