// gemv_bench: the decode linears (M = 1, or --rows M) of Llama-3-8B and of its TP2 / TP4 ranks,
// in isolation on one GPU, for every GEMV configuration (warps per row, shared-memory ring) and
// cuBLASLt, beside the floor (weight bytes / measured copy bandwidth). Each call follows a small
// kernel (RMSNorm of the input rows), as in a decode step, inside a CUDA graph of kCalls such pairs
// (programmatic dependent launch on, so the GEMV's weight prefetch overlaps the norm as it does in
// the engine); the weights rotate over enough copies to exceed twice the L2 cache, so they come
// from DRAM. Times are per pair, minus the norm alone in the same kind of graph. A second table
// does the same after a 10 us predecessor (spin_kernel.h): what each form hides behind it.
//
// --fp8: E4M3 weights with per-channel scales (gemv_fp8.h) instead: the register GEMV, the
// CUDA-core ring and the tensor-core ring (gemv_fp8_mma.cuh), all W8A16, and the W8A8 GEMV
// (gemv_fp8_w8a8.h) on x's E4M3 codes with per-token scales (as the norm would write them; here
// they are fixed); floor = the FP8 bytes.
//
//   gemv_bench [--out FILE.md] [--reps 10] [--rows 1] [--fp8]
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <iterator>
#include <string>
#include <vector>

#include "benchmarks/cuda/bench_common.h"
#include "benchmarks/cuda/spin_kernel.h"
#include "kernels/cuda/elementwise/elementwise.h"
#include "kernels/cuda/gemm/cublaslt_gemm.h"
#include "kernels/cuda/gemm/gemv.h"
#include "kernels/cuda/gemm/gemv_fp8.h"
#include "kernels/cuda/gemm/gemv_fp8_w8a8.h"
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
  int ring_kb = 0;  // != 0: the shared-memory ring form with this ring per block (< 0: its default)
  bool tensor_cores = false;  // FP8: the ring's tensor-core form
  bool w8a8 = false;          // FP8: the W8A8 GEMV on x's codes
};

int Main(int argc, char** argv) {
  bool fp8 = false;
  std::vector<char*> rest;
  for (int i = 0; i < argc; ++i) {
    if (std::string(argv[i]) == "--fp8") {
      fp8 = true;
    } else {
      rest.push_back(argv[i]);
    }
  }
  const KernelBenchArgs args = ParseKernelBenchArgs(static_cast<int>(rest.size()), rest.data(), 10);
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
  const std::vector<Variant> fp8_variants = {{"GEMV auto", 0},
                                             {"GEMV wpr 1", 1},
                                             {"ring (CUDA cores)", 0, -1, false},
                                             {"ring (tensor cores)", 0, -1, true},
                                             {"W8A8 GEMV", 0, 0, false, true}};
  const std::vector<Variant> bf16_variants = {{"GEMV auto", 0},  {"GEMV wpr 1", 1}, {"GEMV wpr 2", 2},
                                         {"GEMV wpr 4", 4}, {"GEMV wpr 8", 8}, {"ring 96 KB", 0, 96},
                                         {"ring (default: all free shared memory)", 0, -1}, {"cuBLASLt", -1}};
  const std::vector<Variant>& variants = fp8 ? fp8_variants : bf16_variants;
  std::vector<std::string> header = {"linear", "N x K", "MB", "floor us"};
  for (const Variant& v : variants) header.push_back(v.name + " us");
  header.push_back("best % of floor");
  Table table(header);
  std::vector<std::string> overlap_header = {"linear", "floor us"};
  for (const Variant& v : variants) overlap_header.push_back(v.name + " us");
  Table overlap(overlap_header);
  constexpr int kSpinNs = 10000;  // the report says 10 us
  const double spin_us = GraphMicrosPerCall(s, kCalls, args.reps, [&](int) { BENCH_CUDA(LaunchSpin(kSpinNs, s)); });

  // The predecessor: RMSNorm of the input row (its output is the GEMV's input).
  const int64_t max_k = 14336;
  void *x = nullptr, *xn = nullptr, *nw = nullptr, *y = nullptr;
  const int rows = args.rows;
  if (rows > cuda::kGemvMaxRows) {
    std::fprintf(stderr, "--rows: at most %d\n", cuda::kGemvMaxRows);
    return 2;
  }
  BENCH_CUDA(cudaMalloc(&x, rows * max_k * 2));
  BENCH_CUDA(cudaMalloc(&xn, rows * max_k * 2));
  BENCH_CUDA(cudaMalloc(&nw, max_k * 2));
  BENCH_CUDA(cudaMalloc(&y, rows * 28672 * 2));
  BENCH_CHECK(cuda::LaunchFillUniform(DType::kBF16, x, rows * max_k, 1, -1.0f, 1.0f, s));
  BENCH_CHECK(cuda::LaunchFillUniform(DType::kBF16, nw, max_k, 2, 0.5f, 1.5f, s));
  void *x_codes = nullptr, *x_scales = nullptr;  // the W8A8 GEMV's input
  BENCH_CUDA(cudaMalloc(&x_codes, rows * max_k));
  BENCH_CUDA(cudaMalloc(&x_scales, rows * sizeof(float)));
  BENCH_CHECK(cuda::LaunchFillUniform(DType::kF8E4M3, x_codes, rows * max_k, 4, -400.0f, 400.0f, s));
  BENCH_CHECK(cuda::LaunchFillUniform(DType::kF32, x_scales, rows, 5, 0.5f / 448, 1.5f / 448, s));
  void* scales = nullptr;
  BENCH_CUDA(cudaMalloc(&scales, 28672 * sizeof(float)));
  BENCH_CHECK(cuda::LaunchFillUniform(DType::kF32, scales, 28672, 3, 0.5f / 448, 1.5f / 448, s));
  // FP8: the 8B shapes only (the TP shards' forms follow from them; device time is short).
  const int num_shapes = fp8 ? 4 : static_cast<int>(std::size(shapes));
  for (int si = 0; si < num_shapes; ++si) {
    const Shape& sh = shapes[si];
    const size_t bytes = static_cast<size_t>(sh.n) * sh.k * (fp8 ? 1 : 2);
    const int copies = static_cast<int>(
        std::max<size_t>(2, (2 * static_cast<size_t>(prop.l2CacheSize) + bytes) / bytes + 1));
    std::vector<void*> w(copies);
    for (int c = 0; c < copies; ++c) {
      BENCH_CUDA(cudaMalloc(&w[c], bytes));
      BENCH_CHECK(fp8 ? cuda::LaunchFillUniform(DType::kF8E4M3, w[c], sh.n * sh.k, 10 + c, -400.0f, 400.0f, s)
                      : cuda::LaunchFillUniform(DType::kBF16, w[c], sh.n * sh.k, 10 + c, -0.05f, 0.05f, s));
    }
    auto norm = [&] {
      BENCH_CHECK(
          cuda::LaunchRmsNorm(DType::kBF16, x, nullptr, nullptr, nw, xn, rows, sh.k, 1e-5f, s, /*pdl=*/true));
    };
    const double norm_us = GraphMicrosPerCall(s, kCalls, args.reps, [&](int) { norm(); });
    const double floor_us = static_cast<double>(bytes) / copy_bw * 1e6;
    std::vector<std::string> row = {sh.what, std::to_string(sh.n) + " x " + std::to_string(sh.k),
                                    Fmt("%.1f", bytes / 1e6), Fmt("%.2f", floor_us)};
    auto linear = [&](const Variant& v, int i) {
      if (v.w8a8) {
        cuda::Fp8GemmArgs a;
        a.x = x_codes;
        a.w = w[i % copies];
        a.x_scale = static_cast<const float*>(x_scales);
        a.w_scale = static_cast<const float*>(scales);
        a.x_mode = a.w_mode = cuda::Fp8ScaleMode::kOuterVector;
        a.out = y;
        a.m = rows;
        a.n = sh.n;
        a.k = sh.k;
        cuda::GemvFp8W8A8Options o;
        o.pdl = true;
        o.num_sms = prop.multiProcessorCount;
        BENCH_CHECK(cuda::LaunchGemvFp8W8A8(a, o, s));
      } else if (fp8) {
        cuda::GemvOptions o;
        o.num_sms = prop.multiProcessorCount;
        o.warps_per_row = v.wpr;
        o.smem_ring = v.ring_kb != 0;
        cuda::Fp8WeightScales sc;
        sc.scale = static_cast<const float*>(scales);
        sc.cols_per = sh.k;
        BENCH_CHECK(cuda::LaunchGemvFp8(DType::kBF16, DType::kBF16, xn, w[i % copies], sc, nullptr, y, rows, sh.n,
                                        sh.k, o, s, v.tensor_cores));
      } else if (v.wpr < 0) {
        BENCH_CHECK((*gemm)->Run(DType::kBF16, DType::kBF16, xn, w[i % copies], nullptr, y, rows, sh.n, sh.k, s));
      } else {
        cuda::GemvOptions o;
        o.num_sms = prop.multiProcessorCount;
        o.warps_per_row = v.wpr;
        o.smem_ring = v.ring_kb != 0;
        o.ring_bytes = v.ring_kb > 0 ? static_cast<size_t>(v.ring_kb) << 10 : 0;
        BENCH_CHECK(cuda::LaunchGemv(DType::kBF16, DType::kBF16, xn, w[i % copies], nullptr, y, rows, sh.n, sh.k, o, s));
      }
    };
    double best = 1e30;
    std::vector<std::string> overlap_row = {sh.what, Fmt("%.2f", floor_us)};
    for (const Variant& v : variants) {
      const double us = GraphMicrosPerCall(s, kCalls, args.reps,
                                           [&](int i) {
                                             norm();
                                             linear(v, i);
                                           }) -
                        norm_us;
      best = std::min(best, us);
      row.push_back(Fmt("%.2f", us));
      // The same after a 10 us predecessor: how much of the linear hides behind it.
      const double spun_us = GraphMicrosPerCall(s, kCalls, args.reps,
                                                [&](int i) {
                                                  BENCH_CUDA(LaunchSpin(kSpinNs, s));
                                                  linear(v, i);
                                                }) -
                             spin_us;
      overlap_row.push_back(Fmt("%.2f", spun_us));
    }
    overlap.Row(overlap_row);
    row.push_back(Fmt("%.0f%%", 100.0 * floor_us / best));
    table.Row(row);
    for (void* p : w) cudaFree(p);
    std::fprintf(stderr, "%s done\n", sh.what);
  }
  char head[1024];
  std::snprintf(
      head, sizeof(head),
      "## Decode linears (M = %d, %s weights, bf16 x) in isolation, %s\n\nTime per GEMV in a CUDA graph of %d (RMSNorm, "
      "linear) pairs with PDL, minus the norm alone; weights rotate over copies exceeding 2x L2. Copy "
      "bandwidth %.2f TB/s. GEMV auto = the GEMV's own choice of warps per row (the engine times it against "
      "cuBLASLt per shape and keeps the faster).\n\n",
      rows, fp8 ? "FP8 E4M3 per-channel" : "bf16", prop.name, kCalls, copy_bw / 1e12);
  const std::string report =
      std::string(head) + table.Markdown() +
      "\nThe same linears after a kernel that lets them launch and then spins for 10 us (" + Fmt("%.2f", spin_us) +
      " us a call alone), minus that kernel: the part of each linear that does not overlap a long predecessor.\n\n" +
      overlap.Markdown();
  std::printf("%s", report.c_str());
  if (!WriteReport(args.out, report)) return 1;

  gemm->reset();
  for (void* p : {x, xn, nw, y, ws, scales}) cudaFree(p);
  return 0;
}

}  // namespace
}  // namespace llm::bench

int main(int argc, char** argv) { return llm::bench::Main(argc, argv); }
