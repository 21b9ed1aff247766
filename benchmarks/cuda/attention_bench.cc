// attention_bench: decode attention over the paged KV cache in isolation, on one GPU: time per
// call inside a CUDA graph of kCalls back-to-back calls (programmatic dependent launch on, as in
// the engine's decode graphs) beside its floor, the KV bytes read / measured copy bandwidth. At
// batch 1 and short contexts that floor is a fraction of a microsecond: the call is bound by
// latency (launch, dependent loads, the split-K combine), so the table also gives the time of a
// trivial kernel (RMSNorm of one 4096 row) in the same kind of graph, the fixed cost any kernel
// pays.
//
//   attention_bench [--out FILE.md] [--reps 20] [--only BATCH,CONTEXT | --only prefill]
// (--only BATCH,CONTEXT: that 8B-shape decode case alone, no prefill: e.g. for a profiler;
// --only prefill: the prefill cases alone)
//
// Shapes: head_dim 128, block size 16, bf16; query heads / KV heads of Llama-3-8B (32/8) and of one
// of its TP2 (16/4) and TP4 (8/2) ranks. Random cache and queries; block tables shuffled.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "benchmarks/cuda/bench_common.h"
#include "kernels/cuda/attention/paged_attention.h"
#include "kernels/cuda/elementwise/elementwise.h"
#include "kernels/cuda/norm/rms_norm.h"

namespace llm::bench {
namespace {

constexpr int kCalls = 32;
constexpr int kHeadDim = 128;
constexpr int kBlockSize = 16;

// One attention call's device inputs: `seqs` sequences of `query_len` new tokens each at the end
// of `context` cached tokens, random bf16 queries and a random bf16 (or FP8 E4M3, scales 1/64)
// cache, block tables shuffled. Owns them.
class AttentionInputs {
 public:
  AttentionInputs(int heads, int kv_heads, int seqs, int query_len, int context, uint64_t seed,
                  std::mt19937& rng, cudaStream_t s, bool fp8_cache = false) {
    const int blocks_per_seq = (context + kBlockSize - 1) / kBlockSize;
    const int64_t num_blocks = int64_t{seqs} * blocks_per_seq;
    const int64_t cache_elems = num_blocks * kv_heads * kBlockSize * kHeadDim;
    const int64_t tokens = int64_t{seqs} * query_len;
    const int64_t q_elems = tokens * heads * kHeadDim;
    const DType cache_dtype = fp8_cache ? DType::kF8E4M3 : DType::kBF16;
    const int64_t cache_bytes = cache_elems * (fp8_cache ? 1 : 2);
    for (auto [ptr, bytes] :
         {std::pair{&k_, cache_bytes}, {&v_, cache_bytes}, {&q_, q_elems * 2}, {&out_, q_elems * 2}})
      BENCH_CUDA(cudaMalloc(ptr, bytes));
    const float range = fp8_cache ? 64.0f : 1.0f;  // FP8: values of 1/64 scale
    BENCH_CHECK(cuda::LaunchFillUniform(cache_dtype, k_, cache_elems, seed, -range, range, s));
    BENCH_CHECK(cuda::LaunchFillUniform(cache_dtype, v_, cache_elems, seed + 1, -range, range, s));
    BENCH_CHECK(cuda::LaunchFillUniform(DType::kBF16, q_, q_elems, seed + 2, -1.0f, 1.0f, s));
    std::vector<int32_t> query_start(seqs + 1), context_lens(seqs, context), tables(num_blocks);
    for (int i = 0; i <= seqs; ++i) query_start[i] = i * query_len;
    std::iota(tables.begin(), tables.end(), 0);
    std::shuffle(tables.begin(), tables.end(), rng);
    for (auto [ptr, host] :
         {std::pair{&query_start_, &query_start}, {&context_lens_, &context_lens}, {&tables_, &tables}}) {
      BENCH_CUDA(cudaMalloc(ptr, host->size() * 4));
      BENCH_CUDA(cudaMemcpy(*ptr, host->data(), host->size() * 4, cudaMemcpyHostToDevice));
    }
    p_.q = q_;
    p_.out = out_;
    p_.k_cache = k_;
    p_.v_cache = v_;
    p_.query_start = query_start_;
    p_.context_lens = context_lens_;
    p_.block_tables = tables_;
    p_.num_tokens = tokens;
    p_.num_seqs = seqs;
    p_.max_query_len = query_len;
    p_.max_context_len = context;
    p_.num_heads = heads;
    p_.num_kv_heads = kv_heads;
    p_.head_dim = kHeadDim;
    p_.block_size = kBlockSize;
    p_.max_blocks_per_seq = blocks_per_seq;
    p_.scale = 0.088f;
    p_.fp8_cache = fp8_cache;
    p_.k_scale = p_.v_scale = fp8_cache ? 1.0f / 64 : 1.0f;
  }
  ~AttentionInputs() {
    for (void* ptr : {k_, v_, q_, out_}) cudaFree(ptr);
    for (int32_t* ptr : {query_start_, context_lens_, tables_}) cudaFree(ptr);
  }
  AttentionInputs(const AttentionInputs&) = delete;
  AttentionInputs& operator=(const AttentionInputs&) = delete;

  const cuda::PagedAttentionParams& params() const { return p_; }

 private:
  void *k_ = nullptr, *v_ = nullptr, *q_ = nullptr, *out_ = nullptr;
  int32_t *query_start_ = nullptr, *context_lens_ = nullptr, *tables_ = nullptr;
  cuda::PagedAttentionParams p_;
};

struct Case {
  const char* shape;
  int heads, kv_heads, batch, context;
};

int Main(int argc, char** argv) {
  const KernelBenchArgs args = ParseKernelBenchArgs(argc, argv, 20);
  const BenchDevice dev = OpenBenchDevice();
  cudaStream_t s = dev.stream;
  const cudaDeviceProp& prop = dev.prop;

  // Copy bandwidth (read + write), as in llm_cuda_bench.
  const double copy_bw = MeasureCopyBandwidth(s, size_t{1} << 30);

  // The fixed cost of a kernel in such a graph: RMSNorm of one row of 4096.
  double trivial_us = 0;
  {
    void *x = nullptr, *w = nullptr, *o = nullptr;
    BENCH_CUDA(cudaMalloc(&x, 4096 * 2));
    BENCH_CUDA(cudaMalloc(&w, 4096 * 2));
    BENCH_CUDA(cudaMalloc(&o, 4096 * 2));
    BENCH_CHECK(cuda::LaunchFillUniform(DType::kBF16, x, 4096, 1, -1.0f, 1.0f, s));
    BENCH_CHECK(cuda::LaunchFillUniform(DType::kBF16, w, 4096, 2, 0.5f, 1.5f, s));
    trivial_us = GraphMicrosPerCall(s, kCalls, args.reps, [&](int) {
      BENCH_CHECK(
          cuda::LaunchRmsNorm(DType::kBF16, x, nullptr, nullptr, w, o, 1, 4096, 1e-5f, s, /*pdl=*/true));
    });
    cudaFree(x);
    cudaFree(w);
    cudaFree(o);
  }

  const Case cases[] = {
      {"8B (32/8)", 32, 8, 1, 128},       {"8B (32/8)", 32, 8, 1, 512},      {"8B (32/8)", 32, 8, 1, 2048},
      {"8B (32/8)", 32, 8, 1, 8192},      {"8B (32/8)", 32, 8, 8, 1024},     {"8B (32/8)", 32, 8, 32, 1024},
      {"8B (32/8)", 32, 8, 128, 512},     {"8B (32/8)", 32, 8, 128, 1024},   {"8B (32/8)", 32, 8, 256, 384},
      {"8B (32/8)", 32, 8, 256, 1536},    {"8B (32/8)", 32, 8, 512, 512},    {"8B (32/8)", 32, 8, 64, 1024},
      {"8B (32/8)", 32, 8, 256, 1024},    {"8B (32/8)", 32, 8, 512, 1024},   {"8B (32/8)", 32, 8, 512, 2048},
      {"TP2 rank (16/4)", 16, 4, 1, 128}, {"TP2 rank (16/4)", 16, 4, 1, 512}, {"TP2 rank (16/4)", 16, 4, 16, 1024},
      {"TP4 rank (8/2)", 8, 2, 1, 128},   {"TP4 rank (8/2)", 8, 2, 1, 2048},
  };
  const size_t ws_bytes = size_t{32} << 20;  // the CUDA backend's default attention workspace
  void* ws = nullptr;
  BENCH_CUDA(cudaMalloc(&ws, ws_bytes));
  BENCH_CUDA(cudaMemset(ws, 0, ws_bytes));  // LaunchPagedAttention: zero-filled before first use
  Table table({"shape (heads/kv)", "batch", "context", "KV MB", "floor us", "tensor-core us (default)", "% of floor",
               "warp kernel us", "% of floor", "two blocks an SM us", "three an SM us (where they fit)",
               "one pass (no split) us", "SIMT kernel us", "x trivial kernel"});
  Table fp8_table({"shape (heads/kv)", "batch", "context", "KV MB", "floor us", "tensor-core us (default)",
                   "% of floor", "warp kernel us", "% of floor", "two blocks an SM us", "three an SM us",
                   "2 slices, four an SM us", "4 slices, four an SM us"});
  std::mt19937 rng(7);
  for (const Case& c : cases) {
    if (!args.only.empty() && (args.only == "prefill" || std::string(c.shape) != "8B (32/8)" ||
                               args.only != std::to_string(c.batch) + "," + std::to_string(c.context)))
      continue;
    for (const bool fp8 : {false, true}) {
      const AttentionInputs inputs(c.heads, c.kv_heads, c.batch, /*query_len=*/1, c.context, 3, rng, s, fp8);
      const cuda::PagedAttentionParams& p = inputs.params();
      auto run = [&](int splits, bool simt = false, cuda::DecodeKernel kernel = cuda::DecodeKernel::kAuto,
                     int blocks_per_sm = 0) {
        cuda::AttentionOptions o;
        o.decode_blocks_per_sm = blocks_per_sm;
        o.num_sms = prop.multiProcessorCount;
        o.force_splits = splits;
        o.force_simt = simt;
        o.decode_kernel = kernel;
        o.pdl = true;
        return GraphMicrosPerCall(s, kCalls, args.reps, [&](int) {
          BENCH_CHECK(cuda::LaunchPagedAttention(DType::kBF16, p, ws, ws_bytes, o, s));
        });
      };
      const double def_us = run(0), warp_us = run(0, false, cuda::DecodeKernel::kWarp);
      // The tensor-core kernel at two and three blocks an SM (where three fit: an FP8 cache).
      const double two_us = run(0, false, cuda::DecodeKernel::kAuto, 2);
      const double three_us = run(0, false, cuda::DecodeKernel::kAuto, 3);
      const double kv_bytes = 2.0 * c.batch * c.context * c.kv_heads * kHeadDim * (fp8 ? 1 : 2);
      const double floor_us = kv_bytes / copy_bw * 1e6;
      std::vector<std::string> row = {c.shape,
                                      std::to_string(c.batch),
                                      std::to_string(c.context),
                                      Fmt("%.2f", kv_bytes / 1e6),
                                      Fmt("%.2f", floor_us),
                                      Fmt("%.2f", def_us),
                                      Fmt("%.0f%%", 100.0 * floor_us / def_us),
                                      Fmt("%.2f", warp_us),
                                      Fmt("%.0f%%", 100.0 * floor_us / warp_us),
                                      Fmt("%.2f", two_us),
                                      Fmt("%.2f", three_us)};
      if (fp8) {
        // More blocks than (token, KV head) rows, where four fit (O transposed, 128 registers).
        row.insert(row.end(), {Fmt("%.2f", run(2, false, cuda::DecodeKernel::kAuto, 4)),
                               Fmt("%.2f", run(4, false, cuda::DecodeKernel::kAuto, 4))});
        fp8_table.Row(row);
      } else {
        const double one_us = run(1), simt_us = run(0, true);
        row.insert(row.end(), {Fmt("%.2f", one_us), Fmt("%.2f", simt_us), Fmt("%.1f", def_us / trivial_us)});
        table.Row(row);
      }
      std::fprintf(stderr, "%s batch %d context %d%s: %.2f us (warp kernel %.2f; two / three an SM %.2f / %.2f)\n",
                   c.shape, c.batch, c.context, fp8 ? " fp8" : "", def_us, warp_us, two_us, three_us);
    }
  }
  cudaFree(ws);

  // Prefill: one prompt (or several) attending causally to itself, the tensor-core kernel.
  Table prefill({"shape (heads/kv)", "sequences x prompt", "TFLOP/s", "us", "GEMM-peak floor us", "FP8 cache TFLOP/s",
                 "FP8 cache us"});
  const double peak = MeasureGemmPeak(s);
  struct PrefillCase {
    const char* shape;
    int heads, kv_heads, seqs, len;
  };
  for (const PrefillCase& c : args.only.empty() || args.only == "prefill"
                                  ? std::vector<PrefillCase>{PrefillCase{"8B (32/8)", 32, 8, 1, 2048},
                                                             PrefillCase{"8B (32/8)", 32, 8, 1, 8192},
                                                             PrefillCase{"8B (32/8)", 32, 8, 8, 512},
                                                             PrefillCase{"TP2 rank (16/4)", 16, 4, 1, 2048}}
                                  : std::vector<PrefillCase>{}) {
    double us[2];
    for (const bool fp8 : {false, true}) {
      const AttentionInputs inputs(c.heads, c.kv_heads, c.seqs, /*query_len=*/c.len, c.len, 6, rng, s, fp8);
      const cuda::PagedAttentionParams& p = inputs.params();
      cuda::AttentionOptions o;
      o.num_sms = prop.multiProcessorCount;
      const auto ms = TimeOnStream(
          s, 2, args.reps, [&] { BENCH_CHECK(cuda::LaunchPagedAttention(DType::kBF16, p, nullptr, 0, o, s)); });
      us[fp8] = 1e3 * Median(ms);
    }
    const double flops = 4.0 * c.seqs * c.heads * kHeadDim * (static_cast<double>(c.len) * (c.len + 1) / 2);
    prefill.Row({c.shape, std::to_string(c.seqs) + " x " + std::to_string(c.len),
                 Fmt("%.0f", flops / (us[0] * 1e-6) / 1e12), Fmt("%.1f", us[0]), Fmt("%.1f", flops / peak * 1e6),
                 Fmt("%.0f", flops / (us[1] * 1e-6) / 1e12), Fmt("%.1f", us[1])});
  }
  char head[1024];
  std::snprintf(
      head, sizeof(head),
      "## Decode attention in isolation, %s\n\nbf16, head_dim 128, block size 16; time per call in a CUDA "
      "graph of %d calls (PDL on), median of %d replays. Copy bandwidth %.2f TB/s; a trivial kernel "
      "(RMSNorm of one 4096 row) in the same kind of graph: %.2f us.\n\n",
      prop.name, kCalls, args.reps, copy_bw / 1e12, trivial_us);
  const std::string report = std::string(head) + table.Markdown() +
                             "\n### Decode attention over an FP8 E4M3 cache (bf16 queries)\n\n" + fp8_table.Markdown() +
                             "\n### Prefill attention (causal, tensor cores), eager calls\n\n" +
                             prefill.Markdown();
  std::printf("%s", report.c_str());
  if (!WriteReport(args.out, report)) return 1;

  return 0;
}

}  // namespace
}  // namespace llm::bench

int main(int argc, char** argv) { return llm::bench::Main(argc, argv); }
