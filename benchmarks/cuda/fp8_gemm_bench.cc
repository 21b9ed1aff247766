// The W8A8 GEMMs of the 8B shapes at 32-2048 rows in isolation: what cuBLASLt offers with the
// engine's scale modes (per-channel weight, per-token input: "outer vector") against per-tensor
// ("scalar") scale modes, whose algorithms include split-K forms, each with cuBLASLt's default
// accumulation (promoted to float32 every few K steps) and with its fast accumulation; and the
// warpgroup GEMM (gemm_fp8_wgmma.cu, which takes up to 64 rows). Weight copies rotate so that no
// call finds its weight in L2. --graphs instead times cuBLASLt's first pick and the warpgroup GEMM
// back to back in a CUDA graph (no launch gaps or event overhead, as in a decode step without PDL),
// beside cuBLASLt's scalar-scale form with float32 sums (every candidate), and prints, for one call
// of the warpgroup GEMM, when its blocks entered, saw their first stage, finished their last MMAs
// and exited.
//
//   fp8_gemm_bench [--rows 32,64,128,256,512] [--reps 20] [--candidates 16] [--only gate_up] [--graphs]
//                  [--out FILE.md]
#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "benchmarks/cuda/bench_common.h"
#include "kernels/cuda/elementwise/elementwise.h"
#include "kernels/cuda/gemm/gemm_fp8_wgmma.h"

namespace llm::bench {
namespace {

#define BENCH_CUBLAS(expr)                                                               \
  do {                                                                                   \
    const cublasStatus_t bench_cs_ = (expr);                                             \
    if (bench_cs_ != CUBLAS_STATUS_SUCCESS) {                                            \
      std::fprintf(stderr, "%s:%d: %s: cuBLAS status %d\n", __FILE__, __LINE__, #expr,   \
                   static_cast<int>(bench_cs_));                                         \
      std::exit(1);                                                                      \
    }                                                                                    \
  } while (0)

struct Shape {
  const char* name;
  int64_t n, k;
};
constexpr Shape kShapes[] = {{"qkv", 6144, 4096}, {"o", 4096, 4096}, {"gate_up", 28672, 4096}, {"down", 4096, 14336}};

struct Args {
  std::vector<int> rows{32, 64, 128, 256, 512};
  int reps = 20;
  int candidates = 16;
  std::string only;  // --only gate_up: that linear alone
  std::string out;
  bool graphs = false;  // --graphs: cuBLASLt and the warpgroup GEMM back to back in graphs, and block times
};

// out[M, N] = x[M, K] · W[N, K]ᵀ with E4M3 operands, as cuBLASLt's column-major outᵀ = Wᵀ(K x N)ᵀ · xᵀ.
struct LtGemm {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  std::vector<cublasLtMatmulAlgo_t> algos;
};

// `fast_accum`: cuBLASLt's FP8 fast accumulation (partial sums stay in the tensor cores'
// accumulator for the whole K instead of being promoted to float32 registers every few steps).
LtGemm MakeLtGemm(cublasLtHandle_t handle, int64_t m, int64_t n, int64_t k, bool outer_vector, cudaDataType_t out_t,
                  const float* w_scale, const float* x_scale, size_t workspace_bytes, int candidates,
                  bool fast_accum = false) {
  LtGemm g;
  BENCH_CUBLAS(cublasLtMatmulDescCreate(&g.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const int8_t fast = fast_accum ? 1 : 0;
  BENCH_CUBLAS(cublasLtMatmulDescSetAttribute(g.desc, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast, sizeof(fast)));
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  BENCH_CUBLAS(cublasLtMatmulDescSetAttribute(g.desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
  BENCH_CUBLAS(cublasLtMatmulDescSetAttribute(g.desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
  const cublasLtMatmulMatrixScale_t mode =
      outer_vector ? CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F : CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F;
  BENCH_CUBLAS(cublasLtMatmulDescSetAttribute(g.desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &mode, sizeof(mode)));
  BENCH_CUBLAS(cublasLtMatmulDescSetAttribute(g.desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &mode, sizeof(mode)));
  BENCH_CUBLAS(cublasLtMatmulDescSetAttribute(g.desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &w_scale, sizeof(w_scale)));
  BENCH_CUBLAS(cublasLtMatmulDescSetAttribute(g.desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &x_scale, sizeof(x_scale)));
  BENCH_CUBLAS(cublasLtMatrixLayoutCreate(&g.a, CUDA_R_8F_E4M3, k, n, k));
  BENCH_CUBLAS(cublasLtMatrixLayoutCreate(&g.b, CUDA_R_8F_E4M3, k, m, k));
  BENCH_CUBLAS(cublasLtMatrixLayoutCreate(&g.c, out_t, n, m, n));
  cublasLtMatmulPreference_t pref = nullptr;
  BENCH_CUBLAS(cublasLtMatmulPreferenceCreate(&pref));
  BENCH_CUBLAS(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace_bytes,
                                                    sizeof(workspace_bytes)));
  std::vector<cublasLtMatmulHeuristicResult_t> results(candidates);
  int found = 0;
  const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(handle, g.desc, g.a, g.b, g.c, g.c, pref, candidates,
                                                           results.data(), &found);
  cublasLtMatmulPreferenceDestroy(pref);
  if (st == CUBLAS_STATUS_SUCCESS)
    for (int i = 0; i < found; ++i) g.algos.push_back(results[i].algo);
  return g;
}

void FreeLtGemm(LtGemm& g) {
  cublasLtMatrixLayoutDestroy(g.a);
  cublasLtMatrixLayoutDestroy(g.b);
  cublasLtMatrixLayoutDestroy(g.c);
  cublasLtMatmulDescDestroy(g.desc);
}

Args Parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    if (k == "--rows") {
      a.rows.clear();
      const std::string list = NextArg(argc, argv, &i);
      for (size_t at = 0; at < list.size();) {
        const size_t end = std::min(list.find(',', at), list.size());
        a.rows.push_back(std::max(1, std::atoi(list.substr(at, end - at).c_str())));
        at = end + 1;
      }
    } else if (k == "--reps") {
      a.reps = std::max(1, std::atoi(NextArg(argc, argv, &i).c_str()));
    } else if (k == "--candidates") {
      a.candidates = std::clamp(std::atoi(NextArg(argc, argv, &i).c_str()), 1, 64);
    } else if (k == "--only") {
      a.only = NextArg(argc, argv, &i);
    } else if (k == "--graphs") {
      a.graphs = true;
    } else if (k == "--out") {
      a.out = NextArg(argc, argv, &i);
    } else {
      std::fprintf(stderr, "usage: %s [--rows 32,64,128,256,512] [--reps N] [--candidates N] [--only qkv|o|gate_up|down] "
                   "[--graphs] [--out FILE.md]\n",
                   argv[0]);
      std::exit(2);
    }
  }
  return a;
}

int Main(int argc, char** argv) {
  const Args args = Parse(argc, argv);
  BenchDevice dev = OpenBenchDevice();
  const cudaStream_t s = dev.stream;
  const double bandwidth = MeasureCopyBandwidth(s);  // bytes read + written a second
  cublasLtHandle_t handle = nullptr;
  BENCH_CUBLAS(cublasLtCreate(&handle));
  const size_t workspace_bytes = size_t{64} << 20;
  void* workspace = nullptr;
  BENCH_CUDA(cudaMalloc(&workspace, workspace_bytes));
  const int num_sms = dev.prop.multiProcessorCount;
  const size_t wgmma_bytes = cuda::GemmFp8WgmmaWorkspaceBytes(num_sms);
  void* wgmma_ws = nullptr;
  BENCH_CUDA(cudaMalloc(&wgmma_ws, wgmma_bytes));
  BENCH_CUDA(cudaMemset(wgmma_ws, 0, wgmma_bytes));
  const int max_rows = *std::max_element(args.rows.begin(), args.rows.end());

  std::string md = absl::StrCat("Device: ", dev.prop.name, " (", num_sms, " SMs); W floor = W bytes / the copy ",
                                "bandwidth (read + write) ", static_cast<int>(bandwidth / 1e9), " GB/s. Microseconds a call, ",
                                "median of ", args.reps, " (weights rotated past L2).\n\n",
                                "| linear | rows | W floor us | cuBLASLt outer-vector scales (first / best of n) | ",
                                "outer-vector, fast accumulation (first / best of n) | best TFLOP/s | ",
                                "scalar scales, bf16 out (first / best) | scalar scales, fast accumulation (first / best) | ",
                                "warpgroup GEMM (up to 64 rows) |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- |\n");
  if (args.graphs)
    md = absl::StrCat(
        "Device: ", dev.prop.name, "; us a call, back to back in a graph (W rotated past L2)\n\n",
        "| linear | rows | W floor us | cuBLASLt outer-vector (first pick) | cuBLASLt scalar scales, "
        "float32 ",
        "sums (first / best of n; a pass applying the scale vectors not included) | warpgroup GEMM |\n",
        "| --- | --- | --- | --- | --- | --- |\n");
  std::printf("%s", md.c_str());
  for (const Shape& shape : kShapes) {
    if (!args.only.empty() && args.only != shape.name) continue;
    const int64_t n = shape.n, k = shape.k, w_bytes = n * k;
    const int copies = static_cast<int>(std::max<int64_t>(2, (int64_t{256} << 20) / w_bytes + 1));
    std::vector<void*> w(copies);
    for (void*& p : w) {
      BENCH_CUDA(cudaMalloc(&p, w_bytes));
      BENCH_CUDA(cudaMemset(p, 0x30, w_bytes));  // E4M3 0.5
    }
    void *x = nullptr, *out16 = nullptr;
    float *w_scale = nullptr, *x_scale = nullptr;
    BENCH_CUDA(cudaMalloc(&x, int64_t{max_rows} * k));
    BENCH_CUDA(cudaMemset(x, 0x30, int64_t{max_rows} * k));
    BENCH_CUDA(cudaMalloc(&out16, int64_t{max_rows} * n * 2));
    BENCH_CUDA(cudaMalloc(reinterpret_cast<void**>(&w_scale), n * sizeof(float)));
    BENCH_CUDA(cudaMalloc(reinterpret_cast<void**>(&x_scale), max_rows * sizeof(float)));
    BENCH_CHECK(cuda::LaunchFillPattern(w_scale, n * 4, 0x3c000000u, s));         // 1/128
    BENCH_CHECK(cuda::LaunchFillPattern(x_scale, max_rows * 4, 0x3c000000u, s));
    // The warpgroup GEMM's arguments: the engine's scale modes (per channel x per token), bf16 out.
    auto wgmma_args = [&](int m, const void* w_copy) {
      cuda::Fp8GemmArgs a;
      a.x = x;
      a.w = w_copy;
      a.x_scale = x_scale;
      a.w_scale = w_scale;
      a.x_mode = a.w_mode = cuda::Fp8ScaleMode::kOuterVector;
      a.out = out16;
      a.out_dtype = DType::kBF16;
      a.m = m;
      a.n = n;
      a.k = k;
      return a;
    };
    if (args.graphs) {
      void* out32 = nullptr;
      BENCH_CUDA(cudaMalloc(&out32, int64_t{max_rows} * n * 4));
      for (const int m : args.rows) {
        auto wg = [&](int i) {
          BENCH_CHECK(cuda::LaunchGemmFp8Wgmma(wgmma_args(m, w[i % copies]), num_sms, wgmma_ws, wgmma_bytes, {}, s));
        };
        const int calls = std::max(copies, 8);
        const bool wgmma_takes = m <= cuda::kGemmFp8WgmmaMaxRows;
        const double wgmma = wgmma_takes ? GraphMicrosPerCall(s, calls, args.reps, wg) : 0.0;
        // Scalar scales and float32 sums: the form whose algorithms include split-K ones.
        LtGemm scalar = MakeLtGemm(handle, m, n, k, false, CUDA_R_32F, w_scale, x_scale, workspace_bytes,
                                   args.candidates);
        double scalar_first = 0, scalar_best = 1e30;
        for (size_t a = 0; a < scalar.algos.size(); ++a) {
          const double us = GraphMicrosPerCall(s, calls, args.reps, [&](int i) {
            const float one = 1.0f, zero = 0.0f;
            BENCH_CUBLAS(cublasLtMatmul(handle, scalar.desc, &one, w[i % copies], scalar.a, x, scalar.b,
                                        &zero, out32, scalar.c, out32, scalar.c, &scalar.algos[a], workspace,
                                        workspace_bytes, s));
          });
          if (a == 0) scalar_first = us;
          scalar_best = std::min(scalar_best, us);
        }
        const size_t scalar_n = scalar.algos.size();
        FreeLtGemm(scalar);
        LtGemm outer = MakeLtGemm(handle, m, n, k, true, CUDA_R_16BF, w_scale, x_scale, workspace_bytes, 1);
        const double lt = GraphMicrosPerCall(s, calls, args.reps, [&](int i) {
          const float one = 1.0f, zero = 0.0f;
          BENCH_CUBLAS(cublasLtMatmul(handle, outer.desc, &one, w[i % copies], outer.a, x, outer.b, &zero, out16,
                                      outer.c, out16, outer.c, &outer.algos[0], workspace, workspace_bytes, s));
        });
        FreeLtGemm(outer);
        if (wgmma_takes) {  // where one call's time goes, block by block (globaltimer), the call after 7 back
                            // to back
          unsigned long long* timing = nullptr;
          BENCH_CUDA(cudaMalloc(reinterpret_cast<void**>(&timing), 4 * num_sms * sizeof(unsigned long long)));
          BENCH_CUDA(cudaMemsetAsync(timing, 0, 4 * num_sms * sizeof(unsigned long long), s));  // blocks not launched: 0
          for (int r = 0; r < 8; ++r) {
            cuda::GemmFp8WgmmaOptions o;
            o.block_times = r == 7 ? timing : nullptr;
            BENCH_CHECK(cuda::LaunchGemmFp8Wgmma(wgmma_args(m, w[r % copies]), num_sms, wgmma_ws, wgmma_bytes, o, s));
          }
          std::vector<unsigned long long> t(4 * num_sms);
          BENCH_CUDA(cudaMemcpyAsync(t.data(), timing, t.size() * 8, cudaMemcpyDeviceToHost, s));
          BENCH_CUDA(cudaStreamSynchronize(s));
          cudaFree(timing);
          int blocks = 0;  // the kernel's grid: the blocks that wrote their entry time
          while (blocks < num_sms && t[4 * blocks] != 0) ++blocks;
          unsigned long long t0 = ~0ull;
          for (int b = 0; b < blocks; ++b) t0 = std::min(t0, t[4 * b]);
          std::string line = absl::StrFormat("timing %s m=%d (us from first entry; min/median/max over blocks):", shape.name, m);
          for (int i = 0; i < 4; ++i) {
            std::vector<double> v;
            for (int b = 0; b < blocks; ++b) v.push_back(1e-3 * static_cast<double>(t[4 * b + i] - t0));
            std::sort(v.begin(), v.end());
            line += absl::StrFormat(" [%s %.1f/%.1f/%.1f]", i == 0 ? "entry" : i == 1 ? "first" : i == 2 ? "last" : "exit",
                                    v.front(), v[v.size() / 2], v.back());
          }
          std::printf("%s\n", line.c_str());
        }
        const double floor_us = 1e6 * static_cast<double>(w_bytes) / bandwidth;
        const std::string row = absl::StrFormat(
            "| %s %dx%d | %d | %.1f | %.1f | %s | %s |\n", shape.name, static_cast<int>(n),
            static_cast<int>(k), m, floor_us, lt,
            scalar_n > 0
                ? absl::StrFormat("%.1f / %.1f of %d", scalar_first, scalar_best, static_cast<int>(scalar_n))
                : std::string("-"),
            wgmma_takes ? absl::StrFormat("%.1f", wgmma) : std::string("-"));
        std::printf("%s", row.c_str());
        std::fflush(stdout);
        md += row;
      }
      cudaFree(out32);
    }
    for (const int m : args.graphs ? std::vector<int>{} : args.rows) {
      int turn = 0;
      auto next_w = [&] { return w[turn++ % copies]; };
      auto time_lt = [&](LtGemm& g, size_t algo, void* out) {
        return 1e3 * Median(TimeOnStream(s, 3, args.reps, [&] {
                 const float one = 1.0f, zero = 0.0f;
                 BENCH_CUBLAS(cublasLtMatmul(handle, g.desc, &one, next_w(), g.a, x, g.b, &zero, out, g.c, out, g.c,
                                             &g.algos[algo], workspace, workspace_bytes, s));
               }));
      };
      auto first_and_best = [&](LtGemm& g, void* out, double* first, double* best, size_t* tried) {
        *tried = g.algos.size();
        *first = *best = 0;
        for (size_t i = 0; i < g.algos.size(); ++i) {
          const double t = time_lt(g, i, out);
          if (i == 0) *first = t;
          *best = i == 0 ? t : std::min(*best, t);
        }
      };
      // The engine's scale modes (per channel x per token) and per-tensor ones, each with cuBLASLt's
      // default (promoted) accumulation and with fast accumulation.
      struct Variant {
        LtGemm g;
        double first = 0, best = 0;
        size_t tried = 0;
      };
      Variant v[4];
      for (int i = 0; i < 4; ++i) {
        v[i].g = MakeLtGemm(handle, m, n, k, /*outer_vector=*/i < 2, CUDA_R_16BF, w_scale, x_scale, workspace_bytes,
                            args.candidates, /*fast_accum=*/(i & 1) != 0);
        first_and_best(v[i].g, out16, &v[i].first, &v[i].best, &v[i].tried);
      }
      auto cell = [](const Variant& x) {
        return x.tried == 0 ? std::string("none") : absl::StrFormat("%.1f / %.1f of %d", x.first, x.best, static_cast<int>(x.tried));
      };
      double best_us = 1e30;
      for (const Variant& x : v)
        if (x.tried > 0) best_us = std::min(best_us, x.best);
      const double tflops = 2.0 * m * static_cast<double>(n) * k / (best_us * 1e-6) / 1e12;
      std::string wg = "-";
      if (m <= cuda::kGemmFp8WgmmaMaxRows) {
        wg = absl::StrFormat("%.1f", 1e3 * Median(TimeOnStream(s, 3, args.reps, [&] {
                                   BENCH_CHECK(cuda::LaunchGemmFp8Wgmma(wgmma_args(m, next_w()), num_sms, wgmma_ws,
                                                                        wgmma_bytes, {}, s));
                                 })));
      }
      const double floor_us = 1e6 * static_cast<double>(w_bytes) / bandwidth;
      const std::string row =
          absl::StrCat("| ", shape.name, " ", n, "x", k, " | ", m, " | ", absl::StrFormat("%.1f", floor_us), " | ",
                       cell(v[0]), " | ", cell(v[1]), " | ", absl::StrFormat("%.0f", tflops), " | ", cell(v[2]), " | ",
                       cell(v[3]), " | ", wg, " |\n");
      std::printf("%s", row.c_str());
      std::fflush(stdout);
      md += row;
      for (Variant& x : v) FreeLtGemm(x.g);
    }
    for (void* p : w) cudaFree(p);
    cudaFree(x);
    cudaFree(out16);
    cudaFree(w_scale);
    cudaFree(x_scale);
  }
  BENCH_CUDA(cudaStreamSynchronize(s));
  if (!args.out.empty()) {
    FILE* f = std::fopen(args.out.c_str(), "w");
    if (f != nullptr) {
      std::fputs(md.c_str(), f);
      std::fclose(f);
    }
  }
  cublasLtDestroy(handle);
  return 0;
}

}  // namespace
}  // namespace llm::bench

int main(int argc, char** argv) { return llm::bench::Main(argc, argv); }
