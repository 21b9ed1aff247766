// gemv_bench: the decode linears (M = 1) of Llama-3-8B and of its TP2 / TP4 ranks, in isolation
// on one GPU, for every GEMV configuration (warps per row) and cuBLASLt, beside the floor (weight bytes /
// measured copy bandwidth). Each call follows a small kernel (RMSNorm of one row), as in a decode step,
// inside a CUDA graph of kCalls such pairs (programmatic dependent launch on, so the GEMV's weight prefetch
// overlaps the norm as it does in the engine); the weights rotate over enough copies to exceed twice the L2
// cache, so they come from DRAM. Times are per pair, minus the norm alone in the same kind of graph.
//
//   gemv_bench [--out FILE.md] [--reps 10]
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "benchmarks/cuda/bench_common.h"
#include "kernels/cuda/elementwise/elementwise.h"
#include "kernels/cuda/gemm/cublaslt_gemm.h"
#include "kernels/cuda/gemm/gemv.h"
#include "kernels/cuda/norm/rms_norm.h"

namespace llm::bench {
namespace {

constexpr int kCalls = 32;

struct Shape {
  const char* what;
  int64_t n, k;
};

struct Variant {
  std::string name;
  int wpr;  // < 0: cuBLASLt; 0: the GEMV's automatic choice
};

int Main(int argc, char** argv) {
  const KernelBenchArgs args = ParseKernelBenchArgs(argc, argv, 10);
  const BenchDevice dev = OpenBenchDevice();
  cudaStream_t s = dev.stream;
  const cudaDeviceProp& prop = dev.prop;

  const double copy_bw = MeasureCopyBandwidth(s, size_t{1} << 30);

  const size_t ws_bytes = size_t{32} << 20;
  void* ws = nullptr;
  BENCH_CUDA(cudaMalloc(&ws, ws_bytes));
  auto gemm = cuda::CublasLtGemm::Create(ws, ws_bytes);
  BENCH_CHECK(gemm.status());

  const Shape shapes[] = {
      {"8B qkv", 6144, 4096},  {"8B o", 4096, 4096},  {"8B gate_up", 28672, 4096},  {"8B down", 4096, 14336},
      {"TP2 qkv", 3072, 4096}, {"TP2 o", 4096, 2048}, {"TP2 gate_up", 14336, 4096}, {"TP2 down", 4096, 7168},
      {"TP4 qkv", 1536, 4096}, {"TP4 o", 4096, 1024}, {"TP4 gate_up", 7168, 4096},  {"TP4 down", 4096, 3584},
  };
  const std::vector<Variant> variants = {{"GEMV auto", 0},  {"GEMV wpr 1", 1}, {"GEMV wpr 2", 2},
                                         {"GEMV wpr 4", 4}, {"GEMV wpr 8", 8}, {"cuBLASLt", -1}};
  std::vector<std::string> header = {"linear", "N x K", "MB", "floor us"};
  for (const Variant& v : variants) header.push_back(v.name + " us");
  header.push_back("best % of floor");
  Table table(header);

  // The predecessor: RMSNorm of the input row (its output is the GEMV's input).
  const int64_t max_k = 14336;
  void *x = nullptr, *xn = nullptr, *nw = nullptr, *y = nullptr;
  BENCH_CUDA(cudaMalloc(&x, max_k * 2));
  BENCH_CUDA(cudaMalloc(&xn, max_k * 2));
  BENCH_CUDA(cudaMalloc(&nw, max_k * 2));
  BENCH_CUDA(cudaMalloc(&y, 28672 * 2));
  BENCH_CHECK(cuda::LaunchFillUniform(DType::kBF16, x, max_k, 1, -1.0f, 1.0f, s));
  BENCH_CHECK(cuda::LaunchFillUniform(DType::kBF16, nw, max_k, 2, 0.5f, 1.5f, s));
  for (const Shape& sh : shapes) {
    const size_t bytes = static_cast<size_t>(sh.n) * sh.k * 2;
    const int copies = static_cast<int>(
        std::max<size_t>(2, (2 * static_cast<size_t>(prop.l2CacheSize) + bytes) / bytes + 1));
    std::vector<void*> w(copies);
    for (int c = 0; c < copies; ++c) {
      BENCH_CUDA(cudaMalloc(&w[c], bytes));
      BENCH_CHECK(cuda::LaunchFillUniform(DType::kBF16, w[c], sh.n * sh.k, 10 + c, -0.05f, 0.05f, s));
    }
    auto norm = [&] {
      BENCH_CHECK(
          cuda::LaunchRmsNorm(DType::kBF16, x, nullptr, nullptr, nw, xn, 1, sh.k, 1e-5f, s, /*pdl=*/true));
    };
    const double norm_us = GraphMicrosPerCall(s, kCalls, args.reps, [&](int) { norm(); });
    const double floor_us = static_cast<double>(bytes) / copy_bw * 1e6;
    std::vector<std::string> row = {sh.what, std::to_string(sh.n) + " x " + std::to_string(sh.k),
                                    Fmt("%.1f", bytes / 1e6), Fmt("%.2f", floor_us)};
    double best = 1e30;
    for (const Variant& v : variants) {
      const double us =
          GraphMicrosPerCall(s, kCalls, args.reps,
                             [&](int i) {
                               norm();
                               if (v.wpr < 0) {
                                 BENCH_CHECK((*gemm)->Run(DType::kBF16, DType::kBF16, xn, w[i % copies],
                                                          nullptr, y, 1, sh.n, sh.k, s));
                               } else {
                                 cuda::GemvOptions o;
                                 o.num_sms = prop.multiProcessorCount;
                                 o.warps_per_row = v.wpr;
                                 BENCH_CHECK(cuda::LaunchGemv(DType::kBF16, DType::kBF16, xn, w[i % copies],
                                                              nullptr, y, 1, sh.n, sh.k, o, s));
                               }
                             }) -
          norm_us;
      best = std::min(best, us);
      row.push_back(Fmt("%.2f", us));
    }
    row.push_back(Fmt("%.0f%%", 100.0 * floor_us / best));
    table.Row(row);
    for (void* p : w) cudaFree(p);
    std::fprintf(stderr, "%s done\n", sh.what);
  }
  char head[1024];
  std::snprintf(
      head, sizeof(head),
      "## Decode linears (M = 1, bf16) in isolation, %s\n\nTime per GEMV in a CUDA graph of %d (RMSNorm, "
      "linear) pairs with PDL, minus the norm alone; weights rotate over copies exceeding 2x L2. Copy "
      "bandwidth %.2f TB/s. GEMV auto = the GEMV's own choice of warps per row (the engine times it against "
      "cuBLASLt per shape and keeps the faster).\n\n",
      prop.name, kCalls, copy_bw / 1e12);
  const std::string report = std::string(head) + table.Markdown();
  std::printf("%s", report.c_str());
  if (!WriteReport(args.out, report)) return 1;

  gemm->reset();
  for (void* p : {x, xn, nw, y, ws}) cudaFree(p);
  return 0;
}

}  // namespace
}  // namespace llm::bench

int main(int argc, char** argv) { return llm::bench::Main(argc, argv); }
