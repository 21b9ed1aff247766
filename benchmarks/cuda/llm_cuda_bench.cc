// llm_cuda_bench: decode and prefill speed of the CUDA backend on a real model shape with dummy
// weights (generated on the GPU), each figure beside its floor:
//   - ceilings measured in the same run: device-to-device copy bandwidth, cuBLASLt bf16 GEMM rate
//   - decode at batch 1 (short context) and at batches 8/32/128 with 1k-token contexts:
//     tokens/s end to end (graph replay + sampling + host), and the bandwidth floor
//     (weight bytes [+ KV bytes read]) / copy bandwidth
//   - prefill of one 2048-token prompt: FLOP/s as a fraction of the measured GEMM rate
//   - per-op time tables (CUDA events around each op, eager) with achieved bandwidth/FLOP rates
//   - A/B: GEMV vs cuBLASLt for the decode linears, programmatic dependent launch on/off
// Usage: llm_cuda_bench --model DIR (config.json) [--out FILE.md] [--steps N] [--quick]
#include <cerrno>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <numeric>
#include <random>
#include <string>

#include "benchmarks/cuda/bench_common.h"
#include "benchmarks/cuda/kernel_timeline.h"
#include "engine/model/config.h"
#include "engine/model/dummy_weights.h"
#include "engine/runtime/model_runner.h"

namespace llm::bench {
namespace {

struct Args {
  std::string model = "benchmarks/cuda/configs/llama3-8b";
  std::string out;
  int steps = 64;
  bool quick = false;
  std::string quantization;             // --quantization fp8 / int4: FP8 (per channel) or 4-bit dummy weights
  std::vector<int> batches;             // --batches 1,16,128: decode batches (context 128 at 1, else 1024)
  std::vector<int> op_batches{1, 32};   // --op-batches 1,128: decode batches with a per-op table
  std::string kv_cache_dtype = "auto";  // --kv-cache-dtype fp8
  bool timeline = false;                // --timeline: each decode batch's kernels as its graph runs (CUPTI)
  int mixed_batch =
      0;  // --mixed-batch 256: the mixed-step case's batch (default 128; runs with --decode-only)
  bool eager = false;  // --eager: decode steps launched op by op (no CUDA graphs), as mixed steps run
  bool decode_only = false;             // --decode-only: the decode table alone (and --op-batches if given)
  bool sampling = false;                // --sampling: decode rows draw (temperature 0.8, top-p 0.95), not greedy
  bool op_batches_given = false;
  int block_size = 16;                  // --block-size 32: tokens a KV cache block (the server's --block-size)
};

// An integer argument of `flag`, or a usage error (exit 2) that names it, where std::stoi would
// throw.
int IntArg(const std::string& flag, const std::string& text) {
  char* end = nullptr;
  errno = 0;
  const long v = std::strtol(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || errno != 0 || v < INT_MIN || v > INT_MAX) {
    std::fprintf(stderr, "llm_cuda_bench: %s takes integers (got \"%s\")\n", flag.c_str(), text.c_str());
    std::exit(2);
  }
  return static_cast<int>(v);
}

std::vector<int> ParseIntList(const std::string& flag, const std::string& list) {
  std::vector<int> v;
  for (size_t at = 0; at < list.size();) {
    const size_t end = std::min(list.find(',', at), list.size());
    v.push_back(IntArg(flag, list.substr(at, end - at)));
    at = end + 1;
  }
  return v;
}

Args Parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    auto next = [&] { return NextArg(argc, argv, &i); };
    if (k == "--model") a.model = next();
    else if (k == "--out") a.out = next();
    else if (k == "--steps") a.steps = IntArg(k, next());
    else if (k == "--quick") a.quick = true;
    else if (k == "--quantization") a.quantization = next();
    else if (k == "--kv-cache-dtype") a.kv_cache_dtype = next();
    else if (k == "--batches") a.batches = ParseIntList(k, next());
    else if (k == "--op-batches") a.op_batches = ParseIntList(k, next()), a.op_batches_given = true;
    else if (k == "--decode-only") a.decode_only = true;
    else if (k == "--block-size") a.block_size = IntArg(k, next());
    else if (k == "--sampling") a.sampling = true;
    else if (k == "--timeline") a.timeline = true;
    else if (k == "--eager")
      a.eager = true;
    else if (k == "--mixed-batch")
      a.mixed_batch = IntArg(k, next());
    else {
      std::fprintf(stderr,
                   "usage: %s --model DIR [--out FILE.md] [--steps N] [--quick] [--quantization fp8|int4] "
                   "[--kv-cache-dtype auto|bf16|fp8] [--batches 1,16,128] [--op-batches 1,32] [--timeline] "
                   "[--eager] [--mixed-batch 128] [--decode-only] [--sampling] [--block-size 16]\n",
                   argv[0]);
      std::exit(2);
    }
  }
  // The sequences' KV room (2048 tokens for the prefill, 1152 for each decode) is whole blocks.
  if (a.block_size < 1 || a.block_size > 128 || (a.block_size & (a.block_size - 1)) != 0) {
    std::fprintf(stderr, "%s: --block-size must be a power of two from 1 to 128 (got %d)\n", argv[0], a.block_size);
    std::exit(2);
  }
  return a;
}

struct Model {
  ModelConfig config;
  std::unique_ptr<ModelRunner> runner;
  CudaBackend* backend = nullptr;
  int32_t width = 0;  // block-table width
  int block_size = 16;  // tokens a KV cache block
  double kv_element_bytes = 2.0;  // the KV cache's storage type (1 for an FP8 cache)
};

constexpr int kMaxContext = 2048;
constexpr int kMaxBatch = 128;  // the mixed-step case's batch; --batches may ask for more
constexpr int kSeqTokens = 1152;  // KV room of each sequence but the first (SeqBlocks)

Model Build(const Args& args) {
  Model m;
  auto config = LoadModelConfig(args.model);
  BENCH_CHECK(config.status());
  m.config = *config;
  CudaBackendOptions bo;
  bo.dtype = DType::kBF16;
  auto backend = CudaBackend::Create(bo);
  BENCH_CHECK(backend.status());
  m.backend = backend->get();
  ShardSpec shard;
  const auto t0 = std::chrono::steady_clock::now();
  LoadOptions load;
  auto quantization = ParseOnlineQuantization(args.quantization);
  BENCH_CHECK(quantization.status());
  load.quantization = *quantization;
  auto kv_dtype = ParseKvCacheDType(args.kv_cache_dtype);
  BENCH_CHECK(kv_dtype.status());
  auto weights = CreateDummyWeights(m.config, shard, **backend, 2024, load);
  BENCH_CHECK(weights.status());
  const double gen_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ModelRunnerOptions ro;
  int max_batch = kMaxBatch;
  for (int b : args.batches) max_batch = std::max(max_batch, b);
  max_batch = std::max(max_batch, args.mixed_batch);
  ro.limits.max_tokens = std::max(2048, max_batch);
  ro.limits.max_seqs = max_batch;
  m.block_size = args.block_size;
  ro.block_size = m.block_size;
  ro.max_context = kMaxContext;
  ro.num_kv_blocks = kMaxContext / m.block_size + int64_t{max_batch - 1} * (kSeqTokens / m.block_size) + 1;
  ro.kv_cache_dtype = *kv_dtype;
  auto runner = ModelRunner::CreateFromWeights(m.config, std::move(*weights), std::move(*backend), nullptr, ro);
  BENCH_CHECK(runner.status());
  m.runner = std::move(*runner);
  m.width = m.runner->block_table_width();
  if (!m.runner->kv_cache_layers().empty())
    m.kv_element_bytes = static_cast<double>(DTypeSize(m.runner->kv_cache_layers().front().k.dtype()));
  std::printf("dummy weights: %.2f GB generated on the GPU in %.2f s; KV cache %.2f GB\n",
              m.runner->weight_bytes() / 1e9, gen_s, m.runner->kv_cache_bytes() / 1e9);
  // The KV cache holds random values: decode speed does not depend on them, NaN-free garbage would.
  uint64_t seed = 7;
  for (const KvCacheLayer& l : m.runner->kv_cache_layers()) {
    BENCH_CHECK(m.backend->FillUniform(l.k, seed++, -1.0f, 1.0f));
    BENCH_CHECK(m.backend->FillUniform(l.v, seed++, -1.0f, 1.0f));
  }
  BENCH_CHECK(m.backend->Synchronize());
  return m;
}

// Blocks of sequence s, disjoint from every other sequence's: sequence 0 (the 2048-token
// prefill) a full table, the others kSeqTokens' worth each (the decode cases stay below 1152 tokens);
// table entries past a sequence's blocks are never read and point at block 0.
std::vector<int32_t> SeqBlocks(const Model& m, int s) {
  std::vector<int32_t> b(m.width, 0);
  if (s == 0) {
    std::iota(b.begin(), b.end(), 0);
  } else {
    const int seq_blocks = kSeqTokens / m.block_size;
    std::iota(b.begin(), b.begin() + std::min(m.width, seq_blocks), kMaxContext / m.block_size + (s - 1) * seq_blocks);
  }
  return b;
}

StepPlan DecodePlan(const Model& m, int batch, int position, std::mt19937& rng) {
  StepPlan plan;
  plan.block_table_width = m.width;
  plan.Clear();
  for (int s = 0; s < batch; ++s) {
    const int32_t tok = static_cast<int32_t>(rng() % m.config.vocab_size);
    plan.AddSequence({&tok, 1}, position, SeqBlocks(m, s), m.block_size, true);
  }
  return plan;
}

struct DecodeTiming {
  double step_ms = 0;     // median end-to-end step (upload + forward + sampling + sync)
  double forward_ms = 0;  // median GPU time of upload + forward (events)
};

// Decodes `steps` steps of `batch` sequences from context `ctx0` (positions ctx0, ctx0 + 1, ...).
// How decode steps sample: greedy, or with --sampling a typical chat setting.
SamplingParams DecodeSampling(bool sampling) {
  SamplingParams p;
  p.temperature = sampling ? 0.8f : 0.0f;
  if (sampling) p.top_p = 0.95f;
  return p;
}
SamplingParams g_decode_sampling = DecodeSampling(false);

DecodeTiming RunDecode(Model& m, int batch, int ctx0, int steps, int warmup = 3) {
  std::mt19937 rng(batch * 1000 + ctx0);
  SampleRow greedy;
  greedy.params = &g_decode_sampling;
  std::vector<SampleRow> rows(batch, greedy);
  std::vector<SampleResult> results(batch);
  cudaStream_t stream = m.backend->stream();
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  std::vector<double> step_ms, fwd_ms;
  for (int i = 0; i < warmup + steps; ++i) {
    const StepPlan plan = DecodePlan(m, batch, ctx0 + i, rng);
    const auto t0 = std::chrono::steady_clock::now();
    cudaEventRecord(a, stream);
    auto logits = m.runner->Forward(plan);
    BENCH_CHECK(logits.status());
    cudaEventRecord(b, stream);
    BENCH_CHECK(m.runner->Sample(*logits, rows, absl::MakeSpan(results)));
    const double host = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    float gpu = 0;
    cudaEventElapsedTime(&gpu, a, b);
    if (i >= warmup) {
      step_ms.push_back(host);
      fwd_ms.push_back(gpu);
    }
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return {Median(step_ms), Median(fwd_ms)};
}

// Bytes of weights a decode step reads: everything but the embedding table (one row per token).
double WeightBytesRead(const Model& m, int batch) {
  const double es = 2.0;
  const double emb = m.config.tie_word_embeddings ? 0.0 : double(m.config.vocab_size) * m.config.hidden_size * es;
  return double(m.runner->weight_bytes()) - emb + batch * m.config.hidden_size * es;
}
double KvBytesRead(const Model& m, int batch, int ctx) {
  return 2.0 * batch * ctx * m.config.num_layers * m.config.num_kv_heads * m.config.head_dim * m.kv_element_bytes;
}

struct OpRow {
  int calls = 0;
  double ms = 0, bytes = 0, flops = 0;
};

// The kernels of `batch`-sequence decode steps (upload, graph replay, sampling) as they run, PDL on:
// what each costs the step (kernel_timeline.h).
std::string KernelTimeline(Model& m, int batch, int ctx) {
  constexpr int kSteps = 8;
  RunDecode(m, batch, ctx, 2, 1);  // graphs captured, nothing left in flight
  BENCH_CHECK(StartKernelTimeline());
  RunDecode(m, batch, ctx, kSteps, 0);
  BENCH_CHECK(m.backend->Synchronize());
  auto records = StopKernelTimeline();
  BENCH_CHECK(records.status());
  return "\n#### Kernels of the decode step at batch " + std::to_string(batch) + " (context " +
         std::to_string(ctx) + ") as it runs (PDL on; CUPTI)\n\n" +
         KernelTimelineTable(*records, kSteps, "AttentionDecode");
}

// Per-op device times of one step. Decode steps are timed inside their CUDA graph: the graph is
// captured with an event node before and after every op and replayed (PDL off, since event
// nodes sit between the kernels); prefill runs eagerly, with events around each op.
std::string OpTable(Model& m, const StepPlan& plan, double bw, double peak, const char* title, double* total_ms) {
  CudaBackendOptions& o = m.backend->mutable_options();
  const bool pdl = o.programmatic_launch;
  o.programmatic_launch = false;
  m.runner->ClearGraphs();
  auto warm = m.runner->Forward(plan);  // warm-up (cuBLASLt heuristics, module loads)
  BENCH_CHECK(warm.status());
  const bool graph = m.runner->graphs_captured() > 0;
  m.runner->ClearGraphs();
  BENCH_CHECK(m.backend->Synchronize());
  m.backend->StartOpTiming();
  auto logits = m.runner->Forward(plan);  // graph: eager run + capture (with event nodes)
  BENCH_CHECK(logits.status());
  if (graph) BENCH_CHECK(m.runner->Forward(plan).status());  // replay: the event nodes fire
  auto all = m.backend->CollectOpTimings();
  BENCH_CHECK(all.status());
  m.runner->ClearGraphs();
  o.programmatic_launch = pdl;
  std::vector<OpTiming> timings = std::move(*all);
  if (graph) {
    timings.erase(timings.begin(), timings.begin() + timings.size() / 2);  // keep the captured ops
    // Inside a graph, attention is launched for the runner's context bound; its byte and FLOP
    // estimates scale to the step's real context.
    const double scale = static_cast<double>(plan.max_context_len) / static_cast<double>(m.runner->max_context());
    for (OpTiming& t : timings) {
      if (t.op.rfind("Attention", 0) != 0) continue;
      t.bytes *= scale;
      t.flops *= scale;
    }
  }
  std::map<std::string, OpRow> agg;
  double total = 0;
  for (const OpTiming& t : timings) {
    OpRow& r = agg[t.op];
    ++r.calls;
    r.ms += t.ms;
    r.bytes += t.bytes;
    r.flops += t.flops;
    total += t.ms;
  }
  *total_ms = total;
  std::vector<std::pair<std::string, OpRow>> sorted(agg.begin(), agg.end());
  std::sort(sorted.begin(), sorted.end(), [](const auto& x, const auto& y) { return x.second.ms > y.second.ms; });
  Table table({"op", "calls", "total ms", "% of step", "GB/s", "TFLOP/s", "bound", "% of ceiling"});
  const double ridge = peak / bw;  // FLOP per byte where the two ceilings meet
  for (const auto& [name, r] : sorted) {
    const double s = r.ms * 1e-3;
    const double gbs = r.bytes / s / 1e9, tf = r.flops / s / 1e12;
    const bool compute = r.flops > 0 && r.flops / std::max(r.bytes, 1.0) > ridge;
    const double frac = compute ? (r.flops / s) / peak : (r.bytes / s) / bw;
    table.Row({name, std::to_string(r.calls), Fmt("%.3f", r.ms), Fmt("%.1f", 100.0 * r.ms / total), Fmt("%.0f", gbs),
               r.flops > 0 ? Fmt("%.1f", tf) : "-", compute ? "FLOP" : "bytes", Fmt("%.0f%%", 100.0 * frac)});
  }
  std::string s = std::string("\n#### ") + title + "\n\n" + table.Markdown();
  s += Fmt("\nSum of op times: %.3f ms", total) +
       (graph ? " (inside the step's CUDA graph, event nodes around each op, PDL off).\n"
              : " (eager, events around each op).\n");
  return s;
}

}  // namespace
}  // namespace llm::bench

int main(int argc, char** argv) {
  using namespace llm;
  using namespace llm::bench;
  Args args = Parse(argc, argv);
  g_decode_sampling = DecodeSampling(args.sampling);
  Model m = Build(args);
  CudaBackend& be = *m.backend;
  std::string md;
  const double bw = MeasureCopyBandwidth(be);
  const double peak = MeasureGemmPeak(be);
  char line[512];
  std::snprintf(line, sizeof(line),
                "Device: %s (%d SMs). Measured ceilings: device-to-device copy %.2f TB/s (read + write), "
                "cuBLASLt bf16 GEMM 8192^3 %.0f TFLOP/s.\n\n",
                be.device_name().c_str(), be.num_sms(), bw / 1e12, peak / 1e12);
  md += line;
  std::printf("%s", line);
  const double weight_bytes = static_cast<double>(m.runner->weight_bytes());
  std::snprintf(line, sizeof(line),
                "Model: %s shape (hidden %ld, %ld layers, %ld/%ld heads, ffn %ld, vocab %ld), %s dummy weights "
                "%.2f GB, KV cache %s.\n\n",
                m.config.model_type.c_str(), long(m.config.hidden_size), long(m.config.num_layers),
                long(m.config.num_heads), long(m.config.num_kv_heads), long(m.config.intermediate_size),
                long(m.config.vocab_size),
                args.quantization == "fp8"    ? "FP8 (per-channel linears, bf16 LM head)"
                : args.quantization == "int4" ? "int4 (W4A16 linears in groups of 128, fp16 scales, bf16 LM head)"
                                              : "bf16",
                weight_bytes / 1e9, std::string(DTypeName(m.runner->kv_shape().dtype)).c_str());
  md += line;

  // --- decode ---
  m.runner->EnableGraphs(!args.eager);
  Table dec({"batch", "context", "step ms (end to end)", "tokens/s", "GPU fwd ms", "floor ms", "floor tokens/s",
             "% of floor (end to end)", "% of floor (GPU fwd)"});
  struct DecodeCase {
    int batch, ctx;
  };
  std::vector<DecodeCase> cases = {{1, 128}, {8, 1024}, {32, 1024}, {128, 1024}};
  std::string timelines;
  if (args.quick) cases = {{1, 128}, {32, 1024}};
  if (!args.batches.empty()) {
    cases.clear();
    for (int b : args.batches) cases.push_back({b, b == 1 ? 128 : 1024});
  }
  for (const DecodeCase& c : cases) {
    const int steps = c.batch >= 32 ? std::max(16, args.steps / 2) : args.steps;
    const DecodeTiming t = RunDecode(m, c.batch, c.ctx, steps);
    // The floor as the issue defines it: all weight bytes (+ the KV bytes the step reads).
    const double ctx_mid = c.ctx + steps / 2.0;
    const double floor_bytes = weight_bytes + KvBytesRead(m, c.batch, static_cast<int>(ctx_mid));
    const double floor_ms = floor_bytes / bw * 1e3;
    dec.Row({std::to_string(c.batch), std::to_string(c.ctx), Fmt("%.3f", t.step_ms),
             Fmt("%.1f", c.batch * 1e3 / t.step_ms), Fmt("%.3f", t.forward_ms), Fmt("%.3f", floor_ms),
             Fmt("%.1f", c.batch * 1e3 / floor_ms), Fmt("%.1f%%", 100.0 * floor_ms / t.step_ms),
             Fmt("%.1f%%", 100.0 * floor_ms / t.forward_ms)});
    std::printf("decode batch %d ctx %d: %.3f ms/step, %.1f tok/s (floor %.3f ms)\n", c.batch, c.ctx, t.step_ms,
                c.batch * 1e3 / t.step_ms, floor_ms);
    std::fflush(stdout);
    if (args.timeline) timelines += KernelTimeline(m, c.batch, c.ctx);
  }
  md += std::string(args.eager ? "### Decode (eager: no CUDA graphs, greedy sampling on the GPU)\n\n"
                               : "### Decode (CUDA graphs, greedy sampling on the GPU)\n\n") +
        dec.Markdown();
  m.runner->EnableGraphs(true);
  std::snprintf(line, sizeof(line),
                "\nFloor = (all weight bytes, %.2f GB, + KV bytes read) / measured copy bandwidth. Bytes a step "
                "actually reads exclude the embedding table: at batch 1 that floor is %.3f ms.\n",
                weight_bytes / 1e9, (WeightBytesRead(m, 1) + KvBytesRead(m, 1, 128)) / bw * 1e3);
  md += line;
  md += timelines;

  if (args.decode_only && !args.op_batches_given) args.op_batches.clear();
  // --- A/B at batch 1: GEMV vs cuBLASLt, PDL on/off ---
  if (!args.decode_only) {
    Table ab({"variant (batch 1)", "step ms", "tokens/s"});
    struct Variant {
      const char* name;
      int gemv;
      bool pdl;
      bool autotune;
      bool ring = true;
      int attention_splits = 0;  // 0: the kernel's own choice
      bool force_ring = false;   // the ring form for every linear it fits, untimed
    };
    for (const Variant& v :
         {Variant{"ring GEMV where it fits, else GEMV or cuBLASLt timed per shape (default)", 0, true, true},
          Variant{"ring GEMV, no PDL in any kernel", 0, false, true},
          Variant{"GEMV or cuBLASLt per shape, timed at first use (ring off)", 0, true, true, false},
          Variant{"GEMV (auto warps per row) + PDL", 0, true, false, false},
          Variant{"GEMV (auto warps per row), no PDL", 0, false, false, false},
          Variant{"GEMV one warp per row + PDL", 1, true, false, false},
          Variant{"cuBLASLt for every linear", -1, true, false},
          Variant{"cuBLASLt for every linear, no PDL in any kernel", -1, false, false},
          Variant{"default, decode attention in one pass (no split-K)", 0, true, true, true, 1},
          Variant{"default, decode attention split 8 ways", 0, true, true, true, 8},
          Variant{"ring form forced (FP8: the tensor-core ring at one row too)", 0, true, false, true, 0, true}}) {
      be.mutable_options().gemv_max_rows = v.gemv < 0 ? 0 : 4;
      be.mutable_options().gemv_warps_per_row = v.force_ring ? CudaBackendOptions::kGemvRingForm : v.gemv < 0 ? 0 : v.gemv;
      be.mutable_options().programmatic_launch = v.pdl;
      be.mutable_options().autotune_linear = v.autotune;
      be.mutable_options().gemv_smem_ring = v.ring;
      be.mutable_options().attention_splits = v.attention_splits;
      m.runner->ClearGraphs();
      const DecodeTiming t = RunDecode(m, 1, 128, std::max(16, args.steps / 2));
      ab.Row({v.name, Fmt("%.3f", t.step_ms), Fmt("%.1f", 1e3 / t.step_ms)});
    }
    be.mutable_options().gemv_max_rows = 4;
    be.mutable_options().gemv_warps_per_row = 0;
    be.mutable_options().programmatic_launch = true;
    be.mutable_options().autotune_linear = true;
    be.mutable_options().gemv_smem_ring = true;
    be.mutable_options().attention_splits = 0;
    m.runner->ClearGraphs();
    md += "\n### Decode variants\n\n" + ab.Markdown();
    // Batch 8: which kernels may take the 8-row linears (the GEMV, with the per-shape timing).
    Table b8({"variant (batch 8, context 1024)", "step ms", "tokens/s"});
    for (int rows : {4, 8}) {
      be.mutable_options().gemv_max_rows = rows;
      m.runner->ClearGraphs();
      const DecodeTiming t = RunDecode(m, 8, 1024, std::max(16, args.steps / 2));
      b8.Row({rows == 4 ? "GEMV up to 4 rows, so cuBLASLt (default)" : "GEMV up to 8 rows, timed per shape against cuBLASLt",
              Fmt("%.3f", t.step_ms), Fmt("%.1f", 8e3 / t.step_ms)});
    }
    be.mutable_options().gemv_max_rows = 4;
    m.runner->ClearGraphs();
    md += "\n" + b8.Markdown();
    // Batches 2 and 4: the ring GEMV (the default up to 2 rows) against the timed choice among the
    // register GEMV forms and cuBLASLt.
    Table b24({"variant (context 1024)", "batch", "step ms", "tokens/s"});
    for (int batch : {2, 4}) {
      for (int ring_rows : {batch, 1}) {
        be.mutable_options().gemv_ring_max_rows = ring_rows;
        m.runner->ClearGraphs();
        const DecodeTiming t = RunDecode(m, batch, 1024, std::max(16, args.steps / 2));
        b24.Row({ring_rows > 1 ? "ring GEMV" : "GEMV or cuBLASLt timed per shape", std::to_string(batch),
                 Fmt("%.3f", t.step_ms), Fmt("%.1f", batch * 1e3 / t.step_ms)});
      }
    }
    be.mutable_options().gemv_ring_max_rows = CudaBackendOptions{}.gemv_ring_max_rows;
    m.runner->ClearGraphs();
    md += "\n" + b24.Markdown();
  }

  // --- prefill ---
  if (!args.decode_only) {
    StepPlan plan;
    plan.block_table_width = m.width;
    plan.Clear();
    std::mt19937 rng(5);
    std::vector<int32_t> prompt(2048);
    for (int32_t& t : prompt) t = static_cast<int32_t>(rng() % m.config.vocab_size);
    plan.AddSequence(prompt, 0, SeqBlocks(m, 0), m.block_size, true);
    const auto ms = TimeOnStream(be.stream(), 2, 5, [&] { BENCH_CHECK(m.runner->Forward(plan).status()); });
    const double t = Median(ms) * 1e-3;
    const ModelConfig& c = m.config;
    const double T = 2048;
    const double per_token_linear = 2.0 * c.num_layers *
                                    (double(c.hidden_size) * (c.q_size() + 2 * c.kv_size()) +
                                     double(c.q_size()) * c.hidden_size + 3.0 * c.hidden_size * c.intermediate_size);
    const double attn = 4.0 * c.num_layers * c.num_heads * c.head_dim * T * (T + 1) / 2;
    const double flops = per_token_linear * T + attn + 2.0 * c.hidden_size * c.vocab_size;
    Table pre({"prompt", "ms", "tokens/s", "TFLOP/s", "GEMM peak TFLOP/s", "% of peak"});
    pre.Row({"2048 tokens, 1 sequence", Fmt("%.2f", t * 1e3), Fmt("%.0f", T / t), Fmt("%.0f", flops / t / 1e12),
             Fmt("%.0f", peak / 1e12), Fmt("%.1f%%", 100.0 * flops / t / peak)});
    md += "\n### Prefill\n\n" + pre.Markdown();
    std::snprintf(line, sizeof(line),
                  "\nFLOPs counted: linear layers 2·T·params (%.2f TFLOP), causal attention 4·L·H·d·T(T+1)/2 (%.2f "
                  "TFLOP), LM head for the last row.\n",
                  per_token_linear * T / 1e12, attn / 1e12);
    md += line;
    std::printf("prefill 2048: %.2f ms, %.0f TFLOP/s (%.1f%% of %.0f)\n", t * 1e3, flops / t / 1e12,
                100.0 * flops / t / peak, peak / 1e12);
    double total = 0;
    md += OpTable(m, plan, bw, peak, "Per-op times, prefill of 2048 tokens", &total);
  }

  // --- mixed steps: 127 decodes at context 512 and one 128-token prompt chunk (a new request
  // joining a running batch), against the 128 decodes alone; eager, since a mixed step has no graph ---
  if (!args.decode_only || args.mixed_batch > 0) {
    const int mb = args.mixed_batch > 0 ? args.mixed_batch : kMaxBatch;
    std::mt19937 rng(9);
    StepPlan decode = DecodePlan(m, mb, 512, rng);
    StepPlan mixed;
    mixed.block_table_width = m.width;
    mixed.Clear();
    for (int s = 0; s + 1 < mb; ++s) {
      const int32_t tok = static_cast<int32_t>(rng() % m.config.vocab_size);
      mixed.AddSequence({&tok, 1}, 512, SeqBlocks(m, s), m.block_size, true);
    }
    std::vector<int32_t> chunk(128);
    for (int32_t& t : chunk) t = static_cast<int32_t>(rng() % m.config.vocab_size);
    mixed.AddSequence(chunk, 0, SeqBlocks(m, mb - 1), m.block_size, true);
    const double d = Median(TimeOnStream(be.stream(), 3, 10, [&] { BENCH_CHECK(m.runner->Forward(decode).status()); }));
    const double x = Median(TimeOnStream(be.stream(), 3, 10, [&] { BENCH_CHECK(m.runner->Forward(mixed).status()); }));
    // What a graph would save: the same two steps launched op by op, and the mixed step captured
    // whole (its metadata upload included) and replayed.
    m.runner->EnableGraphs(false);
    const double d_eager =
        Median(TimeOnStream(be.stream(), 3, 10, [&] { BENCH_CHECK(m.runner->Forward(decode).status()); }));
    BENCH_CHECK(m.backend->Synchronize());
    // Relaxed capture: the runner's step fences wait for earlier (uncaptured) steps.
    cudaGraph_t mixed_graph = nullptr;
    cudaGraphExec_t mixed_exec = nullptr;
    BENCH_CUDA(cudaStreamBeginCapture(be.stream(), cudaStreamCaptureModeRelaxed));
    BENCH_CHECK(m.runner->Forward(mixed).status());
    BENCH_CUDA(cudaStreamEndCapture(be.stream(), &mixed_graph));
    BENCH_CUDA(cudaGraphInstantiate(&mixed_exec, mixed_graph, 0));
    m.runner->EnableGraphs(true);
    const double x_graph = Median(
        TimeOnStream(be.stream(), 3, 10, [&] { BENCH_CUDA(cudaGraphLaunch(mixed_exec, be.stream())); }));
    cudaGraphExecDestroy(mixed_exec);
    cudaGraphDestroy(mixed_graph);
    const ModelConfig& c = m.config;
    const double linear_flops_per_token = 2.0 * c.num_layers *
                                          (double(c.hidden_size) * (c.q_size() + 2 * c.kv_size()) +
                                           double(c.q_size()) * c.hidden_size + 3.0 * c.hidden_size * c.intermediate_size);
    const double bytes = WeightBytesRead(m, mb) + KvBytesRead(m, mb - 1, 513);
    const double flops = linear_flops_per_token * (mb - 1 + 128);
    const double floor_ms = 1e3 * std::max(bytes / bw, flops / peak);
    Table mt({"step", "ms", "floor ms (max of bytes/bandwidth, FLOPs/GEMM peak)", "% of floor"});
    mt.Row({Fmt("%.0f decodes at context 512 (graph)", mb), Fmt("%.3f", d),
            Fmt("%.3f", 1e3 * std::max((WeightBytesRead(m, mb) + KvBytesRead(m, mb, 513)) / bw,
                                       linear_flops_per_token * mb / peak)),
            Fmt("%.1f%%", 100.0 * 1e3 *
                              std::max((WeightBytesRead(m, mb) + KvBytesRead(m, mb, 513)) / bw,
                                       linear_flops_per_token * mb / peak) /
                              d)});
    mt.Row({Fmt("%.0f decodes at context 512 (eager)", mb), Fmt("%.3f", d_eager), "", ""});
    mt.Row({Fmt("%.0f decodes + a 128-token prompt (eager)", mb - 1), Fmt("%.3f", x), Fmt("%.3f", floor_ms),
            Fmt("%.1f%%", 100.0 * floor_ms / x)});
    mt.Row({"the same mixed step captured whole and replayed", Fmt("%.3f", x_graph), Fmt("%.3f", floor_ms),
            Fmt("%.1f%%", 100.0 * floor_ms / x_graph)});
    md += "\n### Mixed steps\n\n" + mt.Markdown();
    std::printf(
        "mixed step: %.3f ms, replayed from a graph %.3f ms (decode alone %.3f ms, eager %.3f ms; floor %.3f "
        "ms)\n",
        x, x_graph, d, d_eager, floor_ms);
    double total = 0;
    md += OpTable(m, mixed, bw, peak,
                  Fmt("Per-op times, %.0f decodes at context 512 + a 128-token prompt", mb - 1).c_str(),
                  &total);
  }

  // --- per-op tables for decode ---
  for (int batch : args.op_batches) {
    std::mt19937 rng(1);
    const StepPlan plan = DecodePlan(m, batch, batch == 1 ? 128 : 1024, rng);
    double total = 0;
    const std::string title = "Per-op times, decode step at batch " + std::to_string(batch) +
                              (batch == 1 ? " (context 129)" : " (context 1025)");
    md += OpTable(m, plan, bw, peak, title.c_str(), &total);
  }

  std::printf("\n%s\n", md.c_str());
  if (!args.out.empty()) {
    std::ofstream f(args.out);
    f << md;
  }
  return 0;
}
