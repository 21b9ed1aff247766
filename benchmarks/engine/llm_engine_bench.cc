// llm_engine_bench: serving-engine speed at a tensor x pipeline parallel layout, without the gRPC
// front-end: the real Engine (continuous batching scheduler, micro-batches over the pipeline
// stages, sampling), fed `batch` requests at once, timed from each request's output callbacks.
//
//   mpirun -np TP*PP llm_engine_bench --model DIR --dummy-weights --device cuda --tp T --pp P
//       [--batch 1,16] [--prompt-len 128] [--output-len 128] [--repeats 3] [--out FILE.md]
//
// Per batch size: per-token decode latency (median and P90 inter-token gap over every request),
// decode throughput (output tokens per second of the whole batch while all requests decode),
// TTFT, and end-to-end output tokens/s. Before the timed runs, one untimed run at the same batch
// captures the decode graphs. Rank 0 prints a markdown table (and appends it to --out), plus every
// rank's memory (weights, KV cache, activations): each rank should hold ~1/(TP*PP) of the model.
//
// With --concurrency C1,C2,... it runs closed loops instead (each finished request is replaced at
// once, for --duration seconds per level) and reports the served figures without any RPC: steady
// output tokens/s (after the first quarter of the level), TPOT, and where each engine step's time
// went (planning, launching, waiting for the device, collecting; device busy and idle), from the
// engine's own step metrics. --no-overlap runs one step at a time, for comparison.
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "engine/distributed/engine_group.h"
#include "parallel/mpi_runtime.h"

namespace llm {
namespace {

using Clock = std::chrono::steady_clock;

struct Args {
  EngineBuildOptions build;
  ParallelOptions parallel;
  std::vector<int> batches = {1, 16};
  int prompt_len = 128;
  int output_len = 128;
  int repeats = 3;
  std::string out;
  std::string label;
  std::vector<int> concurrency;  // closed loops instead of batches
  double duration_s = 20;
};

[[noreturn]] void Usage(const std::string& why) {
  std::fprintf(stderr,
               "llm_engine_bench: %s\n"
               "usage: [mpirun -np TP*PP] llm_engine_bench --model DIR [--dummy-weights] [--device cuda|cpu]\n"
               "  [--dtype bf16|fp16|fp32] [--quantization fp8] [--kv-cache-dtype auto|bf16|fp8] [--tp T] [--pp P] [--layers-per-stage 17,15] [--batch 1,16] [--prompt-len N] [--output-len N]\n"
               "  [--repeats N] [--max-seqs N] [--max-tokens-per-step N] [--kv-cache-fraction F]\n"
               "  [--max-context N] [--label TEXT] [--out FILE.md]\n"
               "  [--concurrency C1,C2 [--duration S]] [--no-overlap]\n",
               why.c_str());
  std::exit(2);
}

int ParseInt(const std::string& flag, const std::string& v) {
  int x = 0;
  if (!absl::SimpleAtoi(v, &x)) Usage(absl::StrCat(flag, ": not an integer: ", v));
  return x;
}

Args Parse(int argc, char** argv) {
  Args a;
  a.build.device = "cuda";
  a.build.dtype = "bf16";
  a.build.max_seqs = 0;  // from the largest batch
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    if (k == "--dummy-weights") {
      a.build.dummy_weights = true;
      continue;
    }
    if (k == "--no-overlap") {
      a.build.overlap_steps = false;
      continue;
    }
    if (i + 1 >= argc) Usage("missing value for " + k);
    const std::string v = argv[++i];
    if (k == "--model") a.build.model_dir = v;
    else if (k == "--device") a.build.device = v;
    else if (k == "--dtype") a.build.dtype = v;
    else if (k == "--quantization") a.build.quantization = v;
    else if (k == "--kv-cache-dtype") a.build.kv_cache_dtype = v;
    else if (k == "--tp") a.parallel.tp = ParseInt(k, v);
    else if (k == "--pp") a.parallel.pp = ParseInt(k, v);
    else if (k == "--layers-per-stage") {
      auto counts = ParseLayersPerStage(v);
      if (!counts.ok()) Usage(std::string(counts.status().message()));
      a.parallel.layers_per_stage = *counts;
    }
    else if (k == "--batch") {
      a.batches.clear();
      for (absl::string_view b : absl::StrSplit(v, ',')) a.batches.push_back(ParseInt(k, std::string(b)));
    } else if (k == "--prompt-len") a.prompt_len = ParseInt(k, v);
    else if (k == "--output-len") a.output_len = ParseInt(k, v);
    else if (k == "--repeats") a.repeats = ParseInt(k, v);
    else if (k == "--max-seqs") a.build.max_seqs = ParseInt(k, v);
    else if (k == "--max-tokens-per-step") a.build.max_tokens_per_step = ParseInt(k, v);
    else if (k == "--max-context") a.build.max_context = ParseInt(k, v);
    else if (k == "--kv-cache-fraction") {
      if (!absl::SimpleAtod(v, &a.build.kv_cache_fraction)) Usage("--kv-cache-fraction: not a number");
    } else if (k == "--label") a.label = v;
    else if (k == "--concurrency") {
      for (absl::string_view c : absl::StrSplit(v, ',')) a.concurrency.push_back(ParseInt(k, std::string(c)));
    } else if (k == "--duration") {
      if (!absl::SimpleAtod(v, &a.duration_s) || a.duration_s <= 0) Usage("--duration: seconds > 0");
    }
    else if (k == "--out") a.out = v;
    else Usage("unknown flag " + k);
  }
  if (a.build.model_dir.empty()) Usage("--model is required");
  if (a.batches.empty() || *std::min_element(a.batches.begin(), a.batches.end()) < 1) Usage("--batch must be >= 1");
  if (a.prompt_len < 1 || a.output_len < 2 || a.repeats < 1) Usage("need --prompt-len >= 1, --output-len >= 2");
  int max_batch = *std::max_element(a.batches.begin(), a.batches.end());
  if (!a.concurrency.empty()) {
    if (*std::min_element(a.concurrency.begin(), a.concurrency.end()) < 1) Usage("--concurrency must be >= 1");
    max_batch = *std::max_element(a.concurrency.begin(), a.concurrency.end());
  }
  if (a.build.max_seqs <= 0) a.build.max_seqs = max_batch;
  if (a.build.max_context <= 0) a.build.max_context = (a.prompt_len + a.output_len + 15) / 16 * 16;
  return a;
}

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double at = p / 100.0 * static_cast<double>(v.size() - 1);
  const size_t lo = static_cast<size_t>(at);
  const size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (at - static_cast<double>(lo));
}

struct RunResult {
  std::vector<double> itl_ms;   // every gap between consecutive tokens of a request
  std::vector<double> ttft_ms;  // submission -> first token
  double decode_tok_s = 0;      // tokens/s while every request decodes (last first token -> first finish)
  double e2e_tok_s = 0;         // all output tokens / (first submission -> last finish)
  int errors = 0;
};

// Submits `batch` requests at once and waits for all; per-token arrival times from the callbacks.
RunResult RunBatch(Engine& engine, const ModelConfig& config, int batch, int prompt_len, int output_len,
                   uint32_t seed) {
  std::mt19937 rng(seed);
  std::mutex mu;
  std::condition_variable cv;
  int finished = 0;
  std::vector<std::vector<Clock::time_point>> arrivals(batch);
  RunResult result;
  const Clock::time_point start = Clock::now();
  for (int b = 0; b < batch; ++b) {
    GenerateRequest r;
    for (int i = 0; i < prompt_len; ++i)
      r.prompt_tokens.push_back(static_cast<int32_t>(rng() % static_cast<uint32_t>(config.vocab_size)));
    r.sampling.temperature = 0.0f;
    r.stop.max_tokens = output_len;
    r.stop.ignore_eos = true;
    r.detokenize = false;
    auto id = engine.Submit(r, [&, b](RequestOutput out) {
      const Clock::time_point now = Clock::now();
      std::lock_guard<std::mutex> lock(mu);
      for (size_t i = 0; i < out.token_ids.size(); ++i) arrivals[b].push_back(now);
      if (out.finished) {
        if (out.finish_reason != FinishReason::kLength) {
          std::fprintf(stderr, "request %d ended with %s: %s\n", b, std::string(FinishReasonName(out.finish_reason)).c_str(),
                       out.status.ToString().c_str());
          ++result.errors;
        }
        ++finished;
        cv.notify_all();
      }
    });
    if (!id.ok()) {
      std::fprintf(stderr, "submit failed: %s\n", id.status().ToString().c_str());
      std::lock_guard<std::mutex> lock(mu);
      ++finished;
      ++result.errors;
    }
  }
  std::unique_lock<std::mutex> lock(mu);
  cv.wait(lock, [&] { return finished == batch; });
  auto ms = [](Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); };
  Clock::time_point last_first = start, first_last = Clock::time_point::max(), end = start;
  int64_t tokens = 0;
  for (const auto& a : arrivals) {
    if (a.empty()) continue;
    tokens += static_cast<int64_t>(a.size());
    result.ttft_ms.push_back(ms(a.front() - start));
    for (size_t i = 1; i < a.size(); ++i) result.itl_ms.push_back(ms(a[i] - a[i - 1]));
    last_first = std::max(last_first, a.front());
    first_last = std::min(first_last, a.back());
    end = std::max(end, a.back());
  }
  // Tokens produced while every request was decoding: count arrivals in (last_first, first_last].
  int64_t steady = 0;
  for (const auto& a : arrivals)
    for (const Clock::time_point& t : a) steady += (t > last_first && t <= first_last) ? 1 : 0;
  if (first_last > last_first) result.decode_tok_s = steady / (ms(first_last - last_first) / 1e3);
  result.e2e_tok_s = tokens / (ms(end - start) / 1e3);
  return result;
}

// A closed loop of `concurrency` requests for `duration_s`: each finished request is replaced at
// once. Returns a markdown table row.
std::string RunClosedLoop(Engine& engine, const ModelConfig& config, const std::string& layout, int concurrency,
                          int prompt_len, int output_len, double duration_s) {
  std::mt19937 rng(concurrency);
  std::mutex mu;
  std::condition_variable cv;
  int running = 0;
  int errors = 0;
  std::vector<Clock::time_point> token_times;  // every token's arrival
  std::vector<double> tpot_ms;                 // per finished request
  token_times.reserve(1 << 20);
  const Clock::time_point start = Clock::now();
  const Clock::time_point stop_at = start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(duration_s));
  struct Live {
    Clock::time_point first, last;
    int tokens = 0;
  };
  std::map<int64_t, Live> live;
  int64_t next_key = 0;
  std::function<void()> submit = [&] {  // with mu held
    GenerateRequest r;
    for (int i = 0; i < prompt_len; ++i)
      r.prompt_tokens.push_back(static_cast<int32_t>(rng() % static_cast<uint32_t>(config.vocab_size)));
    r.sampling.temperature = 0.0f;
    r.stop.max_tokens = output_len;
    r.stop.ignore_eos = true;
    r.detokenize = false;
    const int64_t key = next_key++;
    live[key];
    ++running;
    auto id = engine.Submit(r, [&, key](RequestOutput out) {
      const Clock::time_point now = Clock::now();
      std::lock_guard<std::mutex> lock(mu);
      Live& l = live[key];
      for (size_t i = 0; i < out.token_ids.size(); ++i) token_times.push_back(now);
      if (!out.token_ids.empty()) {
        if (l.tokens == 0) l.first = now;
        l.last = now;
        l.tokens += static_cast<int>(out.token_ids.size());
      }
      if (!out.finished) return;
      if (out.finish_reason != FinishReason::kLength) ++errors;
      if (l.tokens > 1) tpot_ms.push_back(std::chrono::duration<double, std::milli>(l.last - l.first).count() / (l.tokens - 1));
      live.erase(key);
      --running;
      if (now < stop_at) submit();
      cv.notify_all();
    });
    if (!id.ok()) {
      ++errors;
      --running;
      live.erase(key);
    }
  };
  const EngineStats s0 = engine.stats();
  const EngineStepMetrics& m = engine.step_metrics();
  struct Phase {
    const Histogram* h;
    double sum0;
    uint64_t n0;
  };
  std::vector<Phase> phases;
  for (const Histogram* h : {&m.schedule_seconds, &m.launch_seconds, &m.wait_seconds, &m.collect_seconds,
                             &m.device_seconds, &m.output_seconds, &m.sequences})
    phases.push_back({h, h->sum(), h->count()});
  {
    std::unique_lock<std::mutex> lock(mu);
    for (int i = 0; i < concurrency; ++i) submit();
    cv.wait(lock, [&] { return running == 0; });
  }
  const EngineStats s1 = engine.stats();
  auto mean_ms = [](const Phase& p) {
    const uint64_t n = p.h->count() - p.n0;
    return n ? (p.h->sum() - p.sum0) / static_cast<double>(n) * 1e3 : 0.0;
  };
  const double mean_seqs = [&] {
    const uint64_t n = phases[6].h->count() - phases[6].n0;
    return n ? (phases[6].h->sum() - phases[6].sum0) / static_cast<double>(n) : 0.0;
  }();
  // Steady state: tokens that arrived between a quarter of the level and its end of submissions.
  const Clock::time_point w0 = start + (stop_at - start) / 4;
  int64_t steady = 0;
  for (const Clock::time_point& t : token_times) steady += (t >= w0 && t < stop_at) ? 1 : 0;
  const double steady_tok_s = steady / std::chrono::duration<double>(stop_at - w0).count();
  const double busy = s1.device_busy_seconds - s0.device_busy_seconds;
  const double idle = s1.device_idle_seconds - s0.device_idle_seconds;
  const uint64_t steps = s1.steps - s0.steps;
  return absl::StrFormat(
      "| %s | %d | %.0f | %.2f | %.2f | %.1f | %.3f | %.3f | %.3f | %.3f | %.3f | %.3f | %.1f%% | %d |\n", layout,
      concurrency, steady_tok_s, Percentile(tpot_ms, 50), Percentile(tpot_ms, 99), mean_seqs, mean_ms(phases[0]),
      mean_ms(phases[1]), mean_ms(phases[2]), mean_ms(phases[3]), mean_ms(phases[4]), mean_ms(phases[5]),
      busy + idle > 0 ? 100.0 * idle / (busy + idle) : 0.0, errors + static_cast<int>(steps == 0));
}

// One line per rank about its stage's timeline (PP > 1): over the micro-batches of the most common
// token count (the steady decode steps), the median time a micro-batch spent in this stage's Run
// and the median gap between consecutive ones. On stage 0 a span is host enqueue time only (the
// forward is not waited for); on the last stage it runs to the sampled tokens.
void PrintStageTimeline(const EngineGroup& group, const Topology& t) {
  const std::vector<StageSpan>& spans = group.timeline();
  if (t.pp_size() == 1 || spans.size() < 3) return;
  std::map<int32_t, int> counts;
  for (const StageSpan& s : spans) ++counts[s.tokens];
  int32_t common = 0;
  int best = 0;
  for (const auto& [tokens, n] : counts)
    if (n > best) best = n, common = tokens;
  std::vector<double> busy, gaps;
  for (size_t i = 0; i < spans.size(); ++i) {
    if (spans[i].tokens != common) continue;
    busy.push_back(absl::ToDoubleMilliseconds(spans[i].end - spans[i].begin));
    if (i + 1 < spans.size() && spans[i + 1].tokens == common)
      gaps.push_back(absl::ToDoubleMilliseconds(spans[i + 1].begin - spans[i].end));
  }
  std::fprintf(stderr, "stage timeline: rank %d stage %d tp %d: %zu micro-batches of %d tokens, median span %.3f ms, "
               "median gap %.3f ms\n", t.rank(), t.pp_stage(), t.tp_rank(), busy.size(), common,
               Percentile(busy, 50), Percentile(gaps, 50));
}

int Main(int argc, char** argv) {
  auto mpi = MpiRuntime::Create(MpiRuntime::LaunchedByMpiLauncher() ? MpiMode::kInit : MpiMode::kSingleProcess,
                                 &argc, &argv);
  if (!mpi.ok()) {
    std::fprintf(stderr, "llm_engine_bench: %s\n", mpi.status().ToString().c_str());
    return 1;
  }
  const Args args = Parse(argc, argv);
  const auto load_begin = Clock::now();
  auto group = EngineGroup::Create(args.build, args.parallel, **mpi);
  if (!group.ok()) {
    std::fprintf(stderr, "llm_engine_bench: %s\n", group.status().ToString().c_str());
    return 1;
  }
  const double load_s = std::chrono::duration<double>(Clock::now() - load_begin).count();
  auto memory = (*group)->MemoryReport();
  if (!memory.ok()) {
    std::fprintf(stderr, "llm_engine_bench: %s\n", memory.status().ToString().c_str());
    return 1;
  }
  if (!(*group)->is_scheduler()) {
    const absl::Status s = (*group)->RunWorker();
    if (!s.ok()) std::fprintf(stderr, "llm_engine_bench worker: %s\n", s.ToString().c_str());
    PrintStageTimeline(**group, (*group)->topology());
    return s.ok() ? 0 : 1;
  }
  Engine& engine = *(*group)->engine();
  const ModelConfig& config = engine.info().config;
  const std::string layout = absl::StrCat("TP", args.parallel.tp, " x PP", args.parallel.pp);
  std::string report = absl::StrFormat(
      "### %s%s: %s, %s, prompt %d, output %d tokens\n\n"
      "Loaded in %.1f s. Memory per rank:\n\n%s\n"
      "| layout | batch | decode ms/token (median) | P90 | decode tok/s (all requests) | TTFT median ms | "
      "output tok/s end to end | errors |\n| --- | --- | --- | --- | --- | --- | --- | --- |\n",
      layout, args.label.empty() ? "" : absl::StrCat(" (", args.label, ")"), args.build.model_dir.string(),
      args.build.dtype, args.prompt_len, args.output_len, load_s, FormatMemoryReport(*memory));
  int errors = 0;
  if (!args.concurrency.empty()) {
    report = absl::StrFormat(
        "### %s%s: %s, %s, closed loop, prompt %d, output %d tokens, %.0f s a level, overlap %s\n\n"
        "| layout | concurrency | steady out tok/s | TPOT P50 ms | TPOT P99 ms | seqs/step | schedule ms | "
        "launch ms | wait ms | collect ms | device ms | output ms | device idle | errors |\n"
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n",
        layout, args.label.empty() ? "" : absl::StrCat(" (", args.label, ")"), args.build.model_dir.string(),
        args.build.dtype, args.prompt_len, args.output_len, args.duration_s, args.build.overlap_steps ? "on" : "off");
    // Untimed: captures the decode graphs of every batch size up to the largest level.
    const int warm = *std::max_element(args.concurrency.begin(), args.concurrency.end());
    errors += RunBatch(engine, config, warm, args.prompt_len, std::min(args.output_len, 8), 1).errors;
    for (int c : args.concurrency) {
      const std::string row = RunClosedLoop(engine, config, layout, c, args.prompt_len, args.output_len, args.duration_s);
      std::printf("%s", row.c_str());
      std::fflush(stdout);
      report += row;
    }
  }
  for (int batch : args.concurrency.empty() ? args.batches : std::vector<int>{}) {
    // Untimed: captures this batch's decode graph and warms every kernel.
    errors += RunBatch(engine, config, batch, args.prompt_len, std::min(args.output_len, 8), 1).errors;
    std::vector<double> itl, ttft, decode, e2e;
    for (int rep = 0; rep < args.repeats; ++rep) {
      RunResult r = RunBatch(engine, config, batch, args.prompt_len, args.output_len, 100 + rep);
      errors += r.errors;
      itl.insert(itl.end(), r.itl_ms.begin(), r.itl_ms.end());
      ttft.insert(ttft.end(), r.ttft_ms.begin(), r.ttft_ms.end());
      decode.push_back(r.decode_tok_s);
      e2e.push_back(r.e2e_tok_s);
    }
    const std::string row =
        absl::StrFormat("| %s | %d | %.3f | %.3f | %.0f | %.1f | %.0f | %d |\n", layout, batch, Percentile(itl, 50),
                        Percentile(itl, 90), Percentile(decode, 50), Percentile(ttft, 50), Percentile(e2e, 50), errors);
    std::printf("%s", row.c_str());
    std::fflush(stdout);
    report += row;
  }
  std::printf("\n%s\n", report.c_str());
  if (!args.out.empty()) {
    std::ofstream f(args.out, std::ios::app);
    f << report << "\n";
  }
  (*group)->ShutdownEngine();
  PrintStageTimeline(**group, (*group)->topology());
  return errors == 0 ? 0 : 1;
}

}  // namespace
}  // namespace llm

int main(int argc, char** argv) { return llm::Main(argc, argv); }
