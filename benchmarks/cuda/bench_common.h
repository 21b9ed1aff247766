// Shared benchmark harness for the CUDA benchmarks: fail-fast checks, CUDA-event timing, medians, the two measured
// ceilings (device-to-device copy bandwidth, cuBLASLt bf16 GEMM rate) and a markdown table.
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "engine/backend/cuda/cuda_backend.h"
#include "kernels/cuda/elementwise/elementwise.h"
#include "kernels/cuda/gemm/cublaslt_gemm.h"

namespace llm::bench {

#define BENCH_CHECK(expr)                                                                              \
  do {                                                                                                 \
    const ::absl::Status bench_st_ = (expr);                                                           \
    if (!bench_st_.ok()) {                                                                             \
      std::fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, std::string(bench_st_.message()).c_str()); \
      std::exit(1);                                                                                    \
    }                                                                                                  \
  } while (0)
#define BENCH_CUDA(expr)                                                                                \
  do {                                                                                                  \
    const cudaError_t bench_err_ = (expr);                                                              \
    if (bench_err_ != cudaSuccess) {                                                                    \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #expr, cudaGetErrorString(bench_err_)); \
      std::exit(1);                                                                                     \
    }                                                                                                   \
  } while (0)

// The value after the flag at argv[*i] (advancing *i); exits with 2, naming the flag, when
// there is none.
inline std::string NextArg(int argc, char** argv, int* i) {
  if (*i + 1 >= argc) {
    std::fprintf(stderr, "missing value for %s\n", argv[*i]);
    std::exit(2);
  }
  return argv[++*i];
}

inline double Median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Milliseconds of each of `reps` runs of `fn` on `stream` (CUDA events), after `warmup` runs.
inline std::vector<double> TimeOnStream(cudaStream_t stream, int warmup, int reps, const std::function<void()>& fn) {
  for (int i = 0; i < warmup; ++i) fn();
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  std::vector<double> ms;
  for (int i = 0; i < reps; ++i) {
    cudaEventRecord(a, stream);
    fn();
    cudaEventRecord(b, stream);
    cudaEventSynchronize(b);
    float t = 0;
    cudaEventElapsedTime(&t, a, b);
    ms.push_back(t);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return ms;
}

// GPU 0 and a non-blocking stream on it, for the single-GPU kernel benchmarks (the stream lives
// until the process ends).
struct BenchDevice {
  cudaStream_t stream = nullptr;
  cudaDeviceProp prop{};
};
inline BenchDevice OpenBenchDevice() {
  BenchDevice d;
  BENCH_CUDA(cudaSetDevice(0));
  BENCH_CUDA(cudaStreamCreateWithFlags(&d.stream, cudaStreamNonBlocking));
  BENCH_CUDA(cudaGetDeviceProperties(&d.prop, 0));
  return d;
}

// Device-to-device copy bandwidth in bytes/s, counting bytes read plus bytes written.
inline double MeasureCopyBandwidth(cudaStream_t s, size_t bytes = size_t{2} << 30) {
  void *src = nullptr, *dst = nullptr;
  BENCH_CUDA(cudaMalloc(&src, bytes));
  BENCH_CUDA(cudaMalloc(&dst, bytes));
  BENCH_CHECK(cuda::LaunchFillPattern(src, static_cast<int64_t>(bytes), 0x3f803f80u, s));
  const auto ms = TimeOnStream(s, 3, 20, [&] { cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, s); });
  cudaFree(src);
  cudaFree(dst);
  return 2.0 * static_cast<double>(bytes) / (Median(ms) * 1e-3);
}
inline double MeasureCopyBandwidth(CudaBackend& backend, size_t bytes = size_t{2} << 30) {
  return MeasureCopyBandwidth(backend.stream(), bytes);
}

// Microseconds per call when `calls` calls of enqueue(i) are captured into one CUDA graph on `s`
// and the graph is replayed (median of `reps` replays after two warm-ups).
inline double GraphMicrosPerCall(cudaStream_t s, int calls, int reps, const std::function<void(int)>& enqueue) {
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  BENCH_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < calls; ++i) enqueue(i);
  BENCH_CUDA(cudaStreamEndCapture(s, &graph));
  BENCH_CUDA(cudaGraphInstantiate(&exec, graph, 0));
  const auto ms = TimeOnStream(s, 2, reps, [&] { BENCH_CUDA(cudaGraphLaunch(exec, s)); });
  BENCH_CUDA(cudaStreamSynchronize(s));
  BENCH_CUDA(cudaGetLastError());
  BENCH_CUDA(cudaGraphExecDestroy(exec));
  BENCH_CUDA(cudaGraphDestroy(graph));
  return 1e3 * Median(ms) / calls;
}

// The flags of the single-GPU kernel benchmarks: --out FILE.md, --reps N, --rows M (input rows,
// for the benchmarks that take it).
struct KernelBenchArgs {
  std::string out;
  int reps = 10;
  int rows = 1;
  std::string only;  // --only CASE: one case of the bench (each bench says how a case is named)
};
inline KernelBenchArgs ParseKernelBenchArgs(int argc, char** argv, int default_reps) {
  KernelBenchArgs a;
  a.reps = default_reps;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    if (k == "--out") {
      a.out = NextArg(argc, argv, &i);
    } else if (k == "--reps") {
      a.reps = std::max(1, std::atoi(NextArg(argc, argv, &i).c_str()));
    } else if (k == "--rows") {
      a.rows = std::max(1, std::atoi(NextArg(argc, argv, &i).c_str()));
    } else if (k == "--only") {
      a.only = NextArg(argc, argv, &i);
    } else {
      std::fprintf(stderr, "usage: %s [--out FILE.md] [--reps N] [--rows M] [--only CASE]\n", argv[0]);
      std::exit(2);
    }
  }
  return a;
}

// Writes `report` to `path` (when not empty); false when it cannot.
inline bool WriteReport(const std::string& path, const std::string& report) {
  if (path.empty()) return true;
  FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) {
    std::fprintf(stderr, "cannot write %s\n", path.c_str());
    return false;
  }
  std::fputs(report.c_str(), f);
  std::fclose(f);
  return true;
}

// cuBLASLt bf16 GEMM rate (FLOP/s) at m = n = k = `size`, random operands.
inline double MeasureGemmPeak(cudaStream_t s, int64_t size = 8192) {
  const size_t elems = static_cast<size_t>(size) * size;
  void *a = nullptr, *b = nullptr, *c = nullptr, *ws = nullptr;
  const size_t ws_bytes = size_t{64} << 20;
  BENCH_CUDA(cudaMalloc(&a, elems * 2));
  BENCH_CUDA(cudaMalloc(&b, elems * 2));
  BENCH_CUDA(cudaMalloc(&c, elems * 2));
  BENCH_CUDA(cudaMalloc(&ws, ws_bytes));
  BENCH_CHECK(cuda::LaunchFillUniform(DType::kBF16, a, elems, 1, -1.0f, 1.0f, s));
  BENCH_CHECK(cuda::LaunchFillUniform(DType::kBF16, b, elems, 2, -1.0f, 1.0f, s));
  auto gemm = cuda::CublasLtGemm::Create(ws, ws_bytes);
  BENCH_CHECK(gemm.status());
  const auto ms = TimeOnStream(s, 3, 10, [&] {
    BENCH_CHECK((*gemm)->Run(DType::kBF16, DType::kBF16, a, b, nullptr, c, size, size, size, s));
  });
  gemm->reset();
  cudaFree(a);
  cudaFree(b);
  cudaFree(c);
  cudaFree(ws);
  return 2.0 * size * size * size / (Median(ms) * 1e-3);
}
inline double MeasureGemmPeak(CudaBackend& backend, int64_t size = 8192) {
  return MeasureGemmPeak(backend.stream(), size);
}

// A markdown table accumulated row by row.
class Table {
 public:
  explicit Table(std::vector<std::string> header) : header_(std::move(header)) {}
  void Row(std::vector<std::string> cells) { rows_.push_back(std::move(cells)); }
  std::string Markdown() const {
    std::string s = "|";
    for (const auto& h : header_) s += " " + h + " |";
    s += "\n|";
    for (size_t i = 0; i < header_.size(); ++i) s += " --- |";
    s += "\n";
    for (const auto& r : rows_) {
      s += "|";
      for (const auto& c : r) s += " " + c + " |";
      s += "\n";
    }
    return s;
  }

 private:
  std::vector<std::string> header_;
  std::vector<std::vector<std::string>> rows_;
};

inline std::string Fmt(const char* fmt, double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), fmt, v);
  return buf;
}

}  // namespace llm::bench
