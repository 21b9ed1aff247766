// sampler_bench: the GPU sampler (kernels/cuda/sampling/sampler.h) in isolation, on one GPU: time
// per call for 1, 32 and 256 rows of 128256 float32 logits (1 and 32 rows also with one block a
// row, the sampler's form for many rows), greedy and with each sampling stage
// (temperature, top-k, top-p, min-p, log-probabilities), beside the floor of one read of the
// logits at the measured copy bandwidth. Logits are uniform in [-range, range]: a narrow range is
// the worst case for the threshold searches (almost every token keeps some mass), a wide one is
// closer to a trained model's.
//
//   sampler_bench [--out FILE.md] [--reps 20]
#include <cuda_runtime.h>

#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "benchmarks/cuda/bench_common.h"
#include "kernels/cuda/elementwise/elementwise.h"
#include "kernels/cuda/sampling/sampler.h"

namespace llm::bench {
namespace {

constexpr int64_t kVocab = 128256;

struct Config {
  const char* name;
  float temperature, top_p, min_p;
  int top_k, logprobs;
};

int Main(int argc, char** argv) {
  const KernelBenchArgs args = ParseKernelBenchArgs(argc, argv, 20);
  cudaStream_t s;
  BENCH_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  const double bw = MeasureCopyBandwidth(s, size_t{1} << 30);
  constexpr int kMaxRows = 256;
  float *logits = nullptr, *work = nullptr;
  cuda::SamplerRowParams* params = nullptr;
  cuda::SamplerRowResult* results = nullptr;
  int32_t* tokens = nullptr;
  BENCH_CUDA(cudaMalloc(&logits, kMaxRows * kVocab * sizeof(float)));
  BENCH_CUDA(cudaMalloc(&work, kMaxRows * kVocab * sizeof(float)));
  BENCH_CUDA(cudaMalloc(&params, kMaxRows * sizeof(cuda::SamplerRowParams)));
  BENCH_CUDA(cudaMalloc(&results, kMaxRows * sizeof(cuda::SamplerRowResult)));
  BENCH_CUDA(cudaMalloc(&tokens, kMaxRows * sizeof(int32_t)));
  const Config configs[] = {{"greedy", 0.0f, 1.0f, 0.0f, 0, 0},
                            {"greedy, 5 logprobs", 0.0f, 1.0f, 0.0f, 0, 5},
                            {"temperature 0.8", 0.8f, 1.0f, 0.0f, 0, 0},
                            {"temperature 0.8, top-k 50", 0.8f, 1.0f, 0.0f, 50, 0},
                            {"temperature 0.8, top-p 0.95", 0.8f, 0.95f, 0.0f, 0, 0},
                            {"temperature 0.8, min-p 0.05", 0.8f, 1.0f, 0.05f, 0, 0},
                            {"temperature 0.8, top-k 50, top-p 0.95", 0.8f, 0.95f, 0.0f, 50, 0}};
  std::string md = "Sampler, " + std::to_string(kVocab) +
                   " float32 logits a row; us a call (floor: one read of the "
                   "logits at " +
                   Fmt("%.2f", bw / 1e12) + " TB/s)\n\n";
  for (const float range : {2.0f, 20.0f}) {
    BENCH_CHECK(cuda::LaunchFillUniform(DType::kF32, logits, kMaxRows * kVocab, 11, -range, range, s));
    Table t({"logits in [-" + Fmt("%.0f", range) + ", " + Fmt("%.0f", range) + "]", "1 row", "1 row, 1 block",
             "32 rows", "32 rows, 1 block a row", "256 rows"});
    t.Row({"floor", Fmt("%.2f", 1 * kVocab * 4 / bw * 1e6), "", Fmt("%.2f", 32 * kVocab * 4 / bw * 1e6), "",
           Fmt("%.2f", 256 * kVocab * 4 / bw * 1e6)});
    for (const Config& c : configs) {
      std::vector<std::string> cells{c.name};
      for (const auto& [rows, blocks] : {std::pair{1, 8}, {1, 1}, {32, 8}, {32, 1}, {256, 8}}) {
        std::vector<cuda::SamplerRowParams> p(rows);
        for (int r = 0; r < rows; ++r) {
          p[r].temperature = c.temperature;
          p[r].top_p = c.top_p;
          p[r].min_p = c.min_p;
          p[r].top_k = c.top_k;
          p[r].num_top_logprobs = c.logprobs;
          p[r].seed = 1234 + r;
          p[r].step = 7;
        }
        BENCH_CUDA(cudaMemcpyAsync(params, p.data(), rows * sizeof(p[0]), cudaMemcpyHostToDevice, s));
        const auto ms = TimeOnStream(s, 2, args.reps, [&] {
          BENCH_CHECK(cuda::LaunchSampler(logits, rows, kVocab, params, nullptr, nullptr, work, results,
                                          tokens, s, blocks));
        });
        cells.push_back(Fmt("%.1f", Median(ms) * 1e3));
      }
      t.Row(cells);
      std::printf("%s\n", cells[0].c_str());
      std::fflush(stdout);
    }
    md += t.Markdown() + "\n";
  }
  std::printf("\n%s", md.c_str());
  if (!args.out.empty()) {
    FILE* f = std::fopen(args.out.c_str(), "w");
    if (f != nullptr) {
      std::fputs(md.c_str(), f);
      std::fclose(f);
    }
  }
  return 0;
}

}  // namespace
}  // namespace llm::bench

int main(int argc, char** argv) { return llm::bench::Main(argc, argv); }
