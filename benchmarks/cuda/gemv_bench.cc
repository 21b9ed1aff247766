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

struct Args {
  std::string out;
  int reps = 10;
};

Args Parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    if (k == "--out")
      a.out = NextArg(argc, argv, &i);
    else if (k == "--reps")
      a.reps = std::max(1, std::stoi(NextArg(argc, argv, &i)));
    else {
      std::fprintf(stderr, "usage: %s [--out FILE.md] [--reps N]\n", argv[0]);
      std::exit(2);
    }
  }
  return a;
}

double GraphMicros(cudaStream_t s, int reps, const std::function<void(int)>& enqueue) {
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  BENCH_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < kCalls; ++i) enqueue(i);
  BENCH_CUDA(cudaStreamEndCapture(s, &graph));
  BENCH_CUDA(cudaGraphInstantiate(&exec, graph, 0));
  const auto ms = TimeOnStream(s, 2, reps, [&] { BENCH_CUDA(cudaGraphLaunch(exec, s)); });
  BENCH_CUDA(cudaStreamSynchronize(s));
  BENCH_CUDA(cudaGetLastError());
  BENCH_CUDA(cudaGraphExecDestroy(exec));
  BENCH_CUDA(cudaGraphDestroy(graph));
  return 1e3 * Median(ms) / kCalls;
}

struct Shape {
  const char* what;
  int64_t n, k;
};

struct Variant {
  std::string name;
  int wpr;  // < 0: cuBLASLt; 0: the GEMV's automatic choice
};

int Main(int argc, char** argv) {
  const Args args = Parse(argc, argv);
  cudaStream_t s = nullptr;
  BENCH_CUDA(cudaSetDevice(0));
  BENCH_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaDeviceProp prop;
  BENCH_CUDA(cudaGetDeviceProperties(&prop, 0));

  double copy_bw = 0;
  {
    const size_t bytes = size_t{1} << 30;
    void *a = nullptr, *b = nullptr;
    BENCH_CUDA(cudaMalloc(&a, bytes));
    BENCH_CUDA(cudaMalloc(&b, bytes));
    BENCH_CHECK(cuda::LaunchFillPattern(a, static_cast<int64_t>(bytes), 0x3f803f80u, s));
    const auto ms =
        TimeOnStream(s, 3, 20, [&] { cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, s); });
    copy_bw = 2.0 * static_cast<double>(bytes) / (Median(ms) * 1e-3);
    cudaFree(a);
    cudaFree(b);
  }
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
    const double norm_us = GraphMicros(s, args.reps, [&](int) { norm(); });
    const double floor_us = static_cast<double>(bytes) / copy_bw * 1e6;
    std::vector<std::string> row = {sh.what, std::to_string(sh.n) + " x " + std::to_string(sh.k),
                                    Fmt("%.1f", bytes / 1e6), Fmt("%.2f", floor_us)};
    double best = 1e30;
    for (const Variant& v : variants) {
      const double us =
          GraphMicros(s, args.reps,
                      [&](int i) {
                        norm();
                        if (v.wpr < 0) {
                          BENCH_CHECK((*gemm)->Run(DType::kBF16, DType::kBF16, xn, w[i % copies], nullptr, y,
                                                   1, sh.n, sh.k, s));
                        } else {
                          cuda::GemvOptions o;
                          o.num_sms = prop.multiProcessorCount;
                          o.warps_per_row = v.wpr;
                          BENCH_CHECK(cuda::LaunchGemv(DType::kBF16, DType::kBF16, xn, w[i % copies], nullptr,
                                                       y, 1, sh.n, sh.k, o, s));
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
  if (!args.out.empty()) {
    FILE* f = std::fopen(args.out.c_str(), "w");
    if (!f) return 1;
    std::fputs(report.c_str(), f);
    std::fclose(f);
  }
  gemm->reset();
  for (void* p : {x, xn, nw, y, ws}) cudaFree(p);
  return 0;
}

}  // namespace
}  // namespace llm::bench

int main(int argc, char** argv) { return llm::bench::Main(argc, argv); }
