// allreduce_bench: bf16 all-reduce time of NCCL and of the NVLink kernels (one-shot and push,
// parallel/nvlink_communicator.h), 8 KB .. 64 MB, including the tensor-parallel decode shapes
// (hidden 4096 and 8192 x 1, 16, 64 rows), and the decode epilogue (all-reduce + residual add +
// RMSNorm) fused and unfused with either kernel.
//
//   mpirun -np N allreduce_bench [--out FILE.md] [--iters 50] [--reps 25] [--max-bytes 67108864]
//                                [--blocks 32] [--push-bytes 2097152]
//
// Each rank uses GPU local_rank. Per size and path: `iters` back-to-back in-place calls between two
// CUDA events (after a host barrier, so that the ranks start together), `reps` times, and the
// median per call; then the same as a CUDA graph of 32 back-to-back calls (no launch overhead),
// replayed `reps` times. The one-shot communicator is made with a capacity of --max-bytes and no push
// kernel, so every size takes the one-shot kernel (the engine's default capacity is 1 MiB); the
// push communicator's push kernel takes sizes up to --push-bytes (the engine's default: 512 KiB). Every size
// and path ends with a data check (integer-valued bf16, exact). Bandwidths as nccl-tests: algbw = bytes / t,
// busbw = algbw * 2 (n - 1) / n. Rank 0 prints the markdown table (and writes it to --out).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "benchmarks/cuda/bench_common.h"
#include "kernels/core/dtype.h"
#include "kernels/cuda/norm/rms_norm.h"
#include "parallel/mpi_communicator.h"
#include "parallel/mpi_runtime.h"
#include "parallel/nccl_communicator.h"
#include "parallel/nvlink_communicator.h"

namespace llm {
namespace {

using bench::Median;

constexpr int kGraphCalls = 32;

struct Args {
  std::string out;
  int iters = 50;
  int reps = 25;
  size_t max_bytes = size_t{64} << 20;
  int blocks = 32;
  size_t push_bytes = size_t{2} << 20;
};

Args ParseArgs(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    auto next = [&] { return bench::NextArg(argc, argv, &i); };
    if (k == "--out") {
      a.out = next();
    } else if (k == "--iters") {
      a.iters = std::max(1, std::atoi(next().c_str()));
    } else if (k == "--reps") {
      a.reps = std::max(1, std::atoi(next().c_str()));
    } else if (k == "--max-bytes") {
      a.max_bytes = std::strtoull(next().c_str(), nullptr, 10);
    } else if (k == "--blocks") {
      a.blocks = std::atoi(next().c_str());
    } else if (k == "--push-bytes") {
      a.push_bytes = std::strtoull(next().c_str(), nullptr, 10);
    } else {
      std::fprintf(
          stderr,
          "usage: mpirun -np N allreduce_bench [--out FILE.md] [--iters N] [--reps N] [--max-bytes B] "
          "[--blocks N] [--push-bytes B]\n");
      std::exit(2);
    }
  }
  return a;
}

// Microseconds per call: median over `reps` of (`batch` calls between two events) / batch.
double TimePerCall(MpiCommunicator& world, cudaStream_t stream, int reps, int batch,
                   const std::function<void()>& enqueue_batch) {
  cudaEvent_t start, stop;
  BENCH_CUDA(cudaEventCreate(&start));
  BENCH_CUDA(cudaEventCreate(&stop));
  std::vector<double> us;
  for (int r = 0; r < reps; ++r) {
    BENCH_CHECK(world.Barrier());
    BENCH_CUDA(cudaEventRecord(start, stream));
    enqueue_batch();
    BENCH_CUDA(cudaEventRecord(stop, stream));
    BENCH_CUDA(cudaEventSynchronize(stop));
    float ms = 0;
    BENCH_CUDA(cudaEventElapsedTime(&ms, start, stop));
    us.push_back(1e3 * ms / batch);
  }
  BENCH_CUDA(cudaEventDestroy(start));
  BENCH_CUDA(cudaEventDestroy(stop));
  return Median(us);
}

// Microseconds per `call` when kGraphCalls of them are captured into one CUDA graph on comm's
// stream and the graph is replayed (two untimed replays first).
double TimeInGraph(MpiCommunicator& world, DeviceCommunicator& comm, const Args& args,
                   const std::function<void()>& call) {
  cudaStream_t stream = static_cast<cudaStream_t>(comm.stream());
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  BENCH_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < kGraphCalls; ++i) call();
  BENCH_CUDA(cudaStreamEndCapture(stream, &graph));
  BENCH_CUDA(cudaGraphInstantiate(&exec, graph, 0));
  for (int i = 0; i < 2; ++i) BENCH_CUDA(cudaGraphLaunch(exec, stream));
  BENCH_CHECK(comm.Synchronize());
  const double us =
      TimePerCall(world, stream, args.reps, kGraphCalls, [&] { BENCH_CUDA(cudaGraphLaunch(exec, stream)); });
  BENCH_CUDA(cudaGraphExecDestroy(exec));
  BENCH_CUDA(cudaGraphDestroy(graph));
  return us;
}

struct Timing {
  double eager_us = 0;
  double graph_us = 0;
};

// Times in-place all-reduces of `count` bf16 on `comm`, eagerly and as a graph, then checks one
// result: rank r contributes (r + 1) * (1 + i % 7), integers whose sums bf16 holds exactly.
Timing Measure(MpiCommunicator& world, DeviceCommunicator& comm, void* buf, size_t count, const Args& args) {
  cudaStream_t stream = static_cast<cudaStream_t>(comm.stream());
  const size_t bytes = count * 2;
  BENCH_CUDA(cudaMemsetAsync(buf, 0, bytes, stream));  // zeros stay zeros, however many calls
  auto call = [&] { BENCH_CHECK(comm.AllReduceSum(buf, count, DType::kBF16)); };
  for (int i = 0; i < 5; ++i) call();
  BENCH_CHECK(comm.Synchronize());

  Timing t;
  t.eager_us = TimePerCall(world, stream, args.reps, args.iters, [&] {
    for (int i = 0; i < args.iters; ++i) call();
  });

  t.graph_us = TimeInGraph(world, comm, args, call);

  std::vector<uint16_t> host(count);
  for (size_t i = 0; i < count; ++i)
    host[i] = FloatToBf16(static_cast<float>((comm.rank() + 1) * (1 + i % 7)));
  // On `stream` (non-blocking: a plain cudaMemcpy from pageable memory may still be in flight
  // on the legacy stream when the all-reduce reads the buffer).
  BENCH_CUDA(cudaMemcpyAsync(buf, host.data(), bytes, cudaMemcpyHostToDevice, stream));
  call();
  BENCH_CHECK(comm.Synchronize());
  BENCH_CUDA(cudaMemcpy(host.data(), buf, bytes, cudaMemcpyDeviceToHost));
  const int n = comm.size();
  for (size_t i = 0; i < count; ++i) {
    const float want = static_cast<float>(n * (n + 1) / 2 * (1 + i % 7));
    if (Bf16ToFloat(host[i]) != want) {
      std::fprintf(stderr, "rank %d: data check failed at %zu bytes, index %zu: got %g, want %g\n",
                   comm.rank(), bytes, i, Bf16ToFloat(host[i]), want);
      std::exit(1);
    }
  }
  return t;
}

// Microseconds per decode epilogue (rows x hidden bf16: delta all-reduced, added to the
// residual, RMSNorm into out) inside a CUDA graph of kGraphCalls epilogues: `fused` one kernel
// (Communicator::AllReduceAddRmsNorm), else the all-reduce and then the norm kernel (launched
// with PDL, as the engine does).
double MeasureEpilogue(MpiCommunicator& world, DeviceCommunicator& comm, size_t rows, size_t hidden,
                       bool fused, const Args& args) {
  cudaStream_t stream = static_cast<cudaStream_t>(comm.stream());
  const size_t count = rows * hidden;
  void *delta = nullptr, *residual = nullptr, *weight = nullptr, *out = nullptr;
  for (void** p : {&delta, &residual, &out}) {
    BENCH_CUDA(cudaMalloc(p, count * 2));
    BENCH_CUDA(cudaMemsetAsync(*p, 0, count * 2, stream));  // zeros: every replay sees the same values
  }
  BENCH_CUDA(cudaMalloc(&weight, hidden * 2));
  BENCH_CUDA(cudaMemsetAsync(weight, 0, hidden * 2, stream));
  auto call = [&] {
    if (fused) {
      BENCH_CHECK(comm.AllReduceAddRmsNorm(delta, residual, weight, 1e-5f, out, rows, hidden, DType::kBF16));
    } else {
      BENCH_CHECK(AllReduceSumInto(comm, delta, delta, count, DType::kBF16));
      BENCH_CHECK(cuda::LaunchRmsNorm(DType::kBF16, nullptr, residual, delta, weight, out,
                                      static_cast<int64_t>(rows), static_cast<int64_t>(hidden), 1e-5f, stream,
                                      /*pdl=*/true));
    }
  };
  for (int i = 0; i < 3; ++i) call();
  BENCH_CHECK(comm.Synchronize());
  const double us = TimeInGraph(world, comm, args, call);
  for (void* p : {delta, residual, weight, out}) BENCH_CUDA(cudaFree(p));
  return us;
}

std::string SizeLabel(size_t bytes) {
  if (bytes >= (size_t{1} << 20)) return absl::StrCat(bytes >> 20, " MiB");
  return absl::StrCat(bytes >> 10, " KiB");
}

// "4096 x 16" when the size is a decode all-reduce of hidden 4096/8192 and 1, 16 or 64 rows.
std::string ShapeLabel(size_t bytes) {
  std::string label;
  for (size_t hidden : {4096, 8192}) {
    for (size_t rows : {1, 16, 64}) {
      if (hidden * rows * 2 == bytes) absl::StrAppend(&label, label.empty() ? "" : ", ", hidden, " x ", rows);
    }
  }
  return label;
}

int Main(int argc, char** argv) {
  const Args args = ParseArgs(argc, argv);
  auto runtime = MpiRuntime::Create(MpiMode::kInit, &argc, &argv);
  BENCH_CHECK(runtime.status());
  auto world_or = MpiCommunicator::World(**runtime, MpiCommOptions{.timeout = absl::Seconds(600)});
  BENCH_CHECK(world_or.status());
  MpiCommunicator& world = **world_or;
  const int device = (*runtime)->local_rank();
  if (device >= CudaDeviceCount()) {
    std::fprintf(stderr, "rank %d: needs GPU %d, sees %d\n", world.rank(), device, CudaDeviceCount());
    return 1;
  }
  BENCH_CUDA(cudaSetDevice(device));
  cudaStream_t stream = nullptr;
  BENCH_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));

  const NcclOptions nccl_options{.device = device, .timeout = absl::Seconds(300)};
  auto nccl = CreateNcclCommunicator(world, stream, nccl_options);
  BENCH_CHECK(nccl.status());
  // An NVLink communicator over an NCCL communicator of its own.
  auto make_nvlink = [&](const NvlinkOptions& options, NvlinkSetup* setup) {
    auto inner = CreateNcclCommunicator(world, stream, nccl_options);
    BENCH_CHECK(inner.status());
    auto made = CreateNvlinkCommunicator(world, std::move(*inner), options, setup);
    BENCH_CHECK(made.status());
    return std::move(*made);
  };
  // The one-shot kernel for every size up to --max-bytes; the push kernel up to --push-bytes.
  NvlinkSetup setup, push_setup;
  std::unique_ptr<DeviceCommunicator> nvlink = make_nvlink(NvlinkOptions{.capacity_bytes = args.max_bytes,
                                                                         .blocks = args.blocks,
                                                                         .fuse_min_rows = 1,
                                                                         .push_capacity_bytes = 0},
                                                           &setup);
  std::unique_ptr<DeviceCommunicator> push = make_nvlink(NvlinkOptions{.blocks = args.blocks,
                                                                       .fuse_min_rows = 1,
                                                                       .push_capacity_bytes = args.push_bytes,
                                                                       .push_fuse_add_rms_norm = true},
                                                         &push_setup);

  cudaDeviceProp prop;
  BENCH_CUDA(cudaGetDeviceProperties(&prop, device));
  const int n = world.size();
  std::string report = absl::StrFormat(
      "## bf16 all-reduce, %d rank(s), %s\n\nOne-shot: %s. %d back-to-back calls per timed batch (eager) and "
      "a "
      "CUDA graph of %d calls; median of %d batches; times per all-reduce in microseconds; bandwidths in "
      "GB/s from "
      "the graph times (busbw = algbw * 2(n-1)/n).\n\n",
      n, prop.name,
      setup.one_shot ? absl::StrCat("on, ", args.blocks, " blocks, capacity ", setup.capacity_bytes,
                                    " bytes; push kernel up to ", push_setup.push_capacity_bytes, " bytes")
                     : absl::StrCat("off (", setup.reason, ")"),
      args.iters, kGraphCalls, args.reps);
  absl::StrAppend(
      &report,
      "| bytes | hidden x rows | NCCL us | NCCL graph us | one-shot us | one-shot graph us | "
      "push us | push graph us | best graph speed-up | NCCL busbw | one-shot busbw | one-shot algbw |\n"
      "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n");

  void* buf = nullptr;
  BENCH_CUDA(cudaMalloc(&buf, args.max_bytes));
  const double bus_factor = n > 1 ? 2.0 * (n - 1) / n : 1.0;
  for (size_t bytes = size_t{8} << 10; bytes <= args.max_bytes; bytes *= 2) {
    const size_t count = bytes / 2;
    const Timing nccl_t = Measure(world, **nccl, buf, count, args);
    const bool one_shot = setup.one_shot && bytes <= setup.capacity_bytes;
    Timing one_t, push_t;
    if (one_shot) one_t = Measure(world, *nvlink, buf, count, args);
    const bool pushed = bytes <= push_setup.push_capacity_bytes;
    if (pushed) push_t = Measure(world, *push, buf, count, args);
    auto gbps = [&](double us) { return static_cast<double>(bytes) / (us * 1e-6) / 1e9; };
    auto cell = [&](double v, const char* fmt) {
      return one_shot ? absl::StrFormat(fmt, v) : std::string("-");
    };
    auto push_cell = [&](double v) { return pushed ? absl::StrFormat("%.2f", v) : std::string("-"); };
    const double best = pushed ? std::min(one_t.graph_us, push_t.graph_us) : one_t.graph_us;
    absl::StrAppend(
        &report, "| ", SizeLabel(bytes), " | ", ShapeLabel(bytes), " | ",
        absl::StrFormat("%.2f | %.2f | ", nccl_t.eager_us, nccl_t.graph_us), cell(one_t.eager_us, "%.2f"),
        " | ", cell(one_t.graph_us, "%.2f"), " | ", push_cell(push_t.eager_us), " | ",
        push_cell(push_t.graph_us), " | ", cell(nccl_t.graph_us / best, "%.2fx"), " | ",
        absl::StrFormat("%.1f", gbps(nccl_t.graph_us) * bus_factor), " | ",
        cell(gbps(one_t.graph_us) * bus_factor, "%.1f"), " | ", cell(gbps(one_t.graph_us), "%.1f"), " |\n");
    if (world.rank() == 0) std::fprintf(stderr, "%s done\n", SizeLabel(bytes).c_str());
  }
  BENCH_CUDA(cudaFree(buf));

  if (setup.one_shot && setup.fused_add_rms_norm) {
    absl::StrAppend(
        &report,
        "\n### Decode epilogue: all-reduce + residual add + RMSNorm (bf16, in a CUDA graph)\n\n"
        "| hidden x rows | one-shot, then AddRmsNorm us | one-shot fused us | push, then AddRmsNorm us "
        "| push fused us |\n| --- | --- | --- | --- | --- |\n");
    for (size_t rows : {1, 4, 16, 64}) {
      const size_t hidden = 4096;
      if (!nvlink->CanAllReduceAddRmsNorm(rows, hidden, DType::kBF16)) continue;
      const double two = MeasureEpilogue(world, *nvlink, rows, hidden, false, args);
      const double one = MeasureEpilogue(world, *nvlink, rows, hidden, true, args);
      std::string push_cells = "- | -";
      if (rows * hidden * 2 <= push_setup.push_capacity_bytes) {
        push_cells = absl::StrFormat("%.2f | %.2f", MeasureEpilogue(world, *push, rows, hidden, false, args),
                                     MeasureEpilogue(world, *push, rows, hidden, true, args));
      }
      absl::StrAppend(
          &report, absl::StrFormat("| %zu x %zu | %.2f | %.2f | %s |\n", hidden, rows, two, one, push_cells));
    }
  }

  if (world.rank() == 0) {
    std::printf("%s", report.c_str());
    if (!args.out.empty()) {
      FILE* f = std::fopen(args.out.c_str(), "w");
      if (f == nullptr) {
        std::fprintf(stderr, "cannot write %s\n", args.out.c_str());
        return 1;
      }
      std::fputs(report.c_str(), f);
      std::fclose(f);
    }
  }
  push.reset();  // each waits on a world barrier: before the world goes
  nvlink.reset();
  nccl->reset();
  BENCH_CUDA(cudaStreamDestroy(stream));
  return 0;
}

}  // namespace
}  // namespace llm

int main(int argc, char** argv) { return llm::Main(argc, argv); }
