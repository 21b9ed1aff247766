// w4a16_bench: the 4-bit (W4A16) linears of Llama-3-8B in isolation on one GPU, groups of 128,
// fp16 scales, for the kernel choice in engine/backend/cuda/linear_kernels.cc: the tensor-core
// GEMV's forms (x read in place or reordered first, the bulk form's stages) and the widen-a-slice
// + cuBLASLt GEMM at several slice sizes, beside bf16 cuBLASLt on the same shape and the codes' floor (code +
// scale bytes / measured copy bandwidth). Each call follows an RMSNorm of its input (PDL on), inside a CUDA
// graph of kCalls such pairs; the codes rotate over enough copies to exceed twice the L2 cache. Times per
// call, minus the norm alone.
//
//   w4a16_bench [--out FILE.md] [--reps 10]
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <numeric>
#include <string>
#include <vector>

#include "benchmarks/cuda/bench_common.h"
#include "kernels/cuda/elementwise/elementwise.h"
#include "kernels/cuda/gemm/cublaslt_gemm.h"
#include "kernels/cuda/gemm/gemv_w4a16_mma.h"
#include "kernels/cuda/gemm/w4a16_dequant.h"
#include "kernels/cuda/norm/rms_norm.h"

namespace llm::bench {
namespace {

constexpr int kCalls = 16;

struct Shape {
  const char* what;
  int64_t n, k;
};

int Main(int argc, char** argv) {
  const KernelBenchArgs args = ParseKernelBenchArgs(argc, argv, 10);
  const BenchDevice dev = OpenBenchDevice();
  cudaStream_t s = dev.stream;
  const cudaDeviceProp& prop = dev.prop;
  const int sms = prop.multiProcessorCount;
  const double copy_bw = MeasureCopyBandwidth(s, size_t{1} << 30);

  const size_t ws_bytes = size_t{32} << 20;
  void* ws = nullptr;
  BENCH_CUDA(cudaMalloc(&ws, ws_bytes));
  auto gemm = cuda::CublasLtGemm::Create(ws, ws_bytes);
  BENCH_CHECK(gemm.status());
  void* slice = nullptr;  // the widened rows (up to a whole 8B weight)
  const size_t slice_cap = size_t{28672} * 4096 * 2;
  BENCH_CUDA(cudaMalloc(&slice, slice_cap));

  const Shape shapes[] = {{"qkv", 6144, 4096}, {"o", 4096, 4096}, {"gate_up", 28672, 4096}, {"down", 4096, 14336}};
  const int row_counts[] = {1, 4, 8, 16, 32, 128};
  const int64_t max_k = 14336, max_rows = 128;
  void *x = nullptr, *xn = nullptr, *nw = nullptr, *y = nullptr, *x_ws = nullptr;
  const size_t x_ws_bytes = cuda::GemvW4A16MmaXWorkspaceBytes(cuda::kGemvW4A16MmaMaxRows, max_k);
  BENCH_CUDA(cudaMalloc(&x_ws, x_ws_bytes));
  BENCH_CUDA(cudaMalloc(&x, max_rows * max_k * 2));
  BENCH_CUDA(cudaMalloc(&xn, max_rows * max_k * 2));
  BENCH_CUDA(cudaMalloc(&nw, max_k * 2));
  BENCH_CUDA(cudaMalloc(&y, max_rows * 28672 * 4));
  BENCH_CHECK(cuda::LaunchFillUniform(DType::kBF16, x, max_rows * max_k, 1, -1.0f, 1.0f, s));
  BENCH_CHECK(cuda::LaunchFillUniform(DType::kBF16, nw, max_k, 2, 0.5f, 1.5f, s));

  Table table({"linear", "rows", "floor us", "bf16 cuBLASLt us", "GEMV registers",
               "registers, x in fragment order", "bulk", "bulk c8 s4", "bulk c16 s3", "bulk c32 s2",
               "bulk other tiles", "slice 16 MiB", "slice 32 MiB", "whole", "best GB/s"});
  for (const Shape& sh : shapes) {
    const int64_t groups = sh.k / 128, code_bytes = sh.n * sh.k / 2, scale_bytes = sh.n * groups * 2;
    const int copies = static_cast<int>(
        std::max<int64_t>(2, (2 * int64_t{prop.l2CacheSize} + code_bytes) / code_bytes + 1));
    std::vector<void*> codes(copies), scales(copies);
    for (int c = 0; c < copies; ++c) {
      BENCH_CUDA(cudaMalloc(&codes[c], code_bytes));
      BENCH_CUDA(cudaMalloc(&scales[c], scale_bytes));
      BENCH_CHECK(cuda::LaunchFillUniform(DType::kU8, codes[c], code_bytes, 10 + c, 0.0f, 256.0f, s));
      BENCH_CHECK(cuda::LaunchFillUniform(DType::kF16, scales[c], sh.n * groups, 50 + c, 0.001f, 0.01f, s));
    }
    std::vector<int32_t> host_groups(sh.k / 32);
    for (size_t i = 0; i < host_groups.size(); ++i) host_groups[i] = static_cast<int32_t>(i / 4);
    int32_t* chunk_group = nullptr;
    BENCH_CUDA(cudaMalloc(&chunk_group, host_groups.size() * 4));
    BENCH_CUDA(cudaMemcpy(chunk_group, host_groups.data(), host_groups.size() * 4, cudaMemcpyHostToDevice));
    const int64_t wbf_bytes = sh.n * sh.k * 2;
    const int bf_copies = static_cast<int>(std::max<int64_t>(2, (2 * int64_t{prop.l2CacheSize} + wbf_bytes) / wbf_bytes + 1));
    std::vector<void*> wb(bf_copies);
    for (int c = 0; c < bf_copies; ++c) {
      BENCH_CUDA(cudaMalloc(&wb[c], wbf_bytes));
      BENCH_CHECK(cuda::LaunchFillUniform(DType::kBF16, wb[c], sh.n * sh.k, 90 + c, -0.05f, 0.05f, s));
    }
    auto weights = [&](int i) {
      cuda::W4A16Weights w;
      w.codes = static_cast<const uint8_t*>(codes[i % copies]);
      w.scales = scales[i % copies];
      w.chunk_group = chunk_group;
      w.group_chunks = 4;
      w.groups = groups;
      return w;
    };
    const double floor_us = static_cast<double>(code_bytes + scale_bytes) / copy_bw * 1e6;
    for (int rows : row_counts) {
      auto norm = [&] {
        BENCH_CHECK(cuda::LaunchRmsNorm(DType::kBF16, x, nullptr, nullptr, nw, xn, rows, sh.k, 1e-5f, s, true));
      };
      const double norm_us = GraphMicrosPerCall(s, kCalls, args.reps, [&](int) { norm(); });
      auto timed = [&](const std::function<void(int)>& linear) {
        return GraphMicrosPerCall(s, kCalls, args.reps, [&](int i) {
                 norm();
                 linear(i);
               }) -
               norm_us;
      };
      std::vector<std::string> row = {sh.what, std::to_string(rows), Fmt("%.1f", floor_us)};
      double best = 1e30;
      row.push_back(Fmt("%.1f", timed([&](int i) {
                          BENCH_CHECK((*gemm)->Run(DType::kBF16, DType::kBF16, xn, wb[i % bf_copies], nullptr, y, rows,
                                                   sh.n, sh.k, s));
                        })));
      // The GEMV's forms: codes straight to registers, then through shared-memory stages (default
      // sizes, then other stage sizes and counts, then the other tiles-a-warp count).
      std::vector<cuda::GemvW4A16MmaOptions> forms(7);
      forms[0].form = forms[1].form = cuda::GemvW4A16MmaOptions::Form::kRegisters;
      forms[1].x_workspace = x_ws;  // from 5 rows: x reordered first (the backend's default)
      forms[1].x_workspace_bytes = x_ws_bytes;
      for (size_t f = 2; f < forms.size(); ++f) forms[f].form = cuda::GemvW4A16MmaOptions::Form::kBulk;
      forms[3].stage_chunks = 8;
      forms[3].stages = 4;
      forms[4].stage_chunks = 16;
      forms[4].stages = 3;
      forms[5].stage_chunks = 32;
      forms[5].stages = 2;
      forms[6].tiles_per_warp = rows <= 8 ? 2 : 1;
      for (cuda::GemvW4A16MmaOptions o : forms) {
        if (rows > cuda::kGemvW4A16MmaMaxRows) {
          row.push_back("-");
          continue;
        }
        o.pdl = true;
        const double us = timed([&](int i) {
          BENCH_CHECK(cuda::LaunchGemvW4A16Mma(DType::kBF16, DType::kBF16, xn, weights(i), nullptr, y, rows, sh.n, sh.k,
                                               sms, o, s));
        });
        best = std::min(best, us);
        row.push_back(Fmt("%.1f", us));
      }
      for (const int64_t cap : {int64_t{16} << 20, int64_t{32} << 20, int64_t{0}}) {  // 0: the whole weight
        if (rows < 16) {
          row.push_back("-");
          continue;
        }
        const int64_t per_row = sh.k * 2;
        const int64_t srows = cap == 0 ? sh.n : std::min<int64_t>(sh.n, cap / per_row / 64 * 64);
        const double us = timed([&](int i) {
          for (int64_t r0 = 0; r0 < sh.n; r0 += srows) {
            const int64_t nr = std::min(srows, sh.n - r0);
            BENCH_CHECK(cuda::LaunchW4A16Dequantize(DType::kBF16, weights(i), sh.n, r0, nr, sh.k, slice, s));
            BENCH_CHECK((*gemm)->Run(DType::kBF16, DType::kBF16, xn, slice, nullptr,
                                     static_cast<char*>(y) + r0 * 2, rows, nr, sh.k, s, sh.n));
          }
        });
        row.push_back(Fmt("%.1f", us));
        best = std::min(best, us);
      }
      row.push_back(Fmt("%.0f", (code_bytes + scale_bytes) / (best * 1e-6) / 1e9));
      table.Row(row);
      std::printf("%s rows %d done\n", sh.what, rows);
      std::fflush(stdout);
    }
    for (int c = 0; c < copies; ++c) {
      cudaFree(codes[c]);
      cudaFree(scales[c]);
    }
    for (void* p : wb) cudaFree(p);
    cudaFree(chunk_group);
  }
  std::string report = std::string("## W4A16 linears of Llama-3-8B in isolation (") + prop.name + ")\n\n" +
                       Fmt("Copy bandwidth %.2f TB/s.", copy_bw / 1e12) +
                       " Microseconds per call after an RMSNorm (PDL on), codes from DRAM.\n\n" +
                       table.Markdown();
  std::printf("%s", report.c_str());
  return WriteReport(args.out, report) ? 0 : 1;
}

}  // namespace
}  // namespace llm::bench

int main(int argc, char** argv) { return llm::bench::Main(argc, argv); }
