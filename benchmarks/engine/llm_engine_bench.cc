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
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <fstream>
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
};

[[noreturn]] void Usage(const std::string& why) {
  std::fprintf(stderr,
               "llm_engine_bench: %s\n"
               "usage: [mpirun -np TP*PP] llm_engine_bench --model DIR [--dummy-weights] [--device cuda|cpu]\n"
               "  [--dtype bf16|fp16|fp32] [--quantization fp8] [--kv-cache-dtype auto|bf16|fp8] [--tp T] [--pp P] [--layers-per-stage 17,15] [--batch 1,16] [--prompt-len N] [--output-len N]\n"
               "  [--repeats N] [--max-seqs N] [--max-tokens-per-step N] [--kv-cache-fraction F]\n"
               "  [--max-context N] [--label TEXT] [--out FILE.md]\n",
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
    else if (k == "--out") a.out = v;
    else Usage("unknown flag " + k);
  }
  if (a.build.model_dir.empty()) Usage("--model is required");
  if (a.batches.empty() || *std::min_element(a.batches.begin(), a.batches.end()) < 1) Usage("--batch must be >= 1");
  if (a.prompt_len < 1 || a.output_len < 2 || a.repeats < 1) Usage("need --prompt-len >= 1, --output-len >= 2");
  const int max_batch = *std::max_element(a.batches.begin(), a.batches.end());
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
  for (int batch : args.batches) {
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
