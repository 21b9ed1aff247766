#include "engine/backend/cuda/cuda_backend.h"
#include "engine/backend/cuda/linear_kernels.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "kernels/cuda/attention/paged_attention.h"
#include "kernels/cuda/common/cuda_status.h"
#include "kernels/cuda/elementwise/elementwise.h"
#include "kernels/cuda/elementwise/gather.h"
#include "kernels/cuda/gemm/cublaslt_gemm.h"
#include "kernels/cuda/gemm/gemm_few_rows.h"
#include "kernels/cuda/gemm/gemm_fp8_wgmma.h"
#include "kernels/cuda/norm/rms_norm.h"
#include "kernels/cuda/rope/qkv_rope.h"
#include "kernels/cuda/sampling/pending_tokens.h"
#include "kernels/cuda/sampling/sampler.h"

namespace llm {
namespace {

absl::Status Expect(bool ok, const char* op, const std::string& what) {
  if (ok) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(op, ": ", what));
}

// The backend's own device scratch (workspaces, sampler buffers), carved from the arena like
// every other buffer, so that it is sized before the KV cache takes what is left. It only grows:
// the old range goes back first, so that the new one may reuse it.
struct DeviceMem {
  Buffer buffer;
  void* ptr() const { return buffer.data(); }
  size_t bytes() const { return buffer.bytes(); }
  absl::Status Ensure(DeviceArena& arena, size_t want, std::string_view what) {
    if (want <= bytes()) return absl::OkStatus();
    buffer = Buffer();
    ASSIGN_OR_RETURN(buffer, arena.Allocate(want, what));
    return absl::OkStatus();
  }
};
// RAII pinned-host allocation.
struct HostMem {
  void* ptr = nullptr;
  size_t bytes = 0;
  HostMem() = default;
  HostMem(const HostMem&) = delete;
  HostMem& operator=(const HostMem&) = delete;
  ~HostMem() { Reset(); }
  void Reset() {
    if (ptr) cudaFreeHost(ptr);
    ptr = nullptr;
    bytes = 0;
  }
  absl::Status Ensure(size_t want) {
    if (want <= bytes) return absl::OkStatus();
    Reset();
    CUDA_RETURN_IF_ERROR(cudaMallocHost(&ptr, want));
    bytes = want;
    return absl::OkStatus();
  }
};

class CudaStepGraph final : public StepGraph {
 public:
  CudaStepGraph(cudaGraph_t graph, cudaGraphExec_t exec, cudaStream_t stream)
      : graph_(graph), exec_(exec), stream_(stream) {}
  ~CudaStepGraph() override {
    if (exec_) cudaGraphExecDestroy(exec_);
    if (graph_) cudaGraphDestroy(graph_);
  }
  absl::Status Replay() override {
    CUDA_RETURN_IF_ERROR(cudaGraphLaunch(exec_, stream_));
    return absl::OkStatus();
  }

 private:
  cudaGraph_t graph_;
  cudaGraphExec_t exec_;
  cudaStream_t stream_;
};

// A CUDA event on the backend's stream (timing enabled: StepFence::MillisecondsSince).
class CudaStepFence final : public StepFence {
 public:
  CudaStepFence(cudaEvent_t event, cudaStream_t stream) : event_(event), stream_(stream) {}
  ~CudaStepFence() override { cudaEventDestroy(event_); }
  absl::Status Record() override {
    CUDA_RETURN_IF_ERROR(cudaEventRecord(event_, stream_));
    return absl::OkStatus();
  }
  absl::Status Wait() override {
    CUDA_RETURN_IF_ERROR(cudaEventSynchronize(event_));
    return absl::OkStatus();
  }
  absl::StatusOr<double> MillisecondsSince(const StepFence& earlier) const override {
    const auto* e = dynamic_cast<const CudaStepFence*>(&earlier);
    if (e == nullptr) return absl::InvalidArgumentError("fences of different backends");
    float ms = 0.0f;
    CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&ms, e->event_, event_));
    return static_cast<double>(ms);
  }

 private:
  cudaEvent_t event_;
  cudaStream_t stream_;
};

constexpr int kMaxTimedOps = 8192;

}  // namespace

struct CudaBackend::Impl {
  CudaBackendOptions options;
  cudaStream_t stream = nullptr;
  // A mixed step's prefill attention runs on side_stream beside its decode attention (forked and
  // joined by the two events; cuda::AttentionOptions::side_stream).
  cudaStream_t side_stream = nullptr;
  cudaEvent_t fork_event = nullptr, join_event = nullptr;
  cudaDeviceProp prop{};
  double dram_bytes_per_second = 0;  // peak, from the memory clock and bus width (LinearContext)
  // Shared with every Buffer carved from it (their deleters hold it), so it outlives them all.
  std::shared_ptr<DeviceArena> arena;
  DeviceMem gemm_workspace, attention_workspace, fp8_workspace, few_rows_workspace;
  DeviceMem unit_scale;  // one float 1.0: the scalar scales of cuBLASLt's raw FP8 sums
  std::unique_ptr<cuda::CublasLtGemm> gemm;
  bool capturing = false;
  // The linear-kernel policy (engine/backend/cuda/linear_kernels.h) and whether this is a tuning
  // pass (SetTuningPass).
  std::unique_ptr<LinearKernels> linears;
  bool tuning_pass = false;

  // Sampler buffers. The device ones serve one sampling at a time (stream order); the pinned host
  // ones, one set per sample slot, so that the host can prepare step N+1's sampling while step N's
  // copies are still queued and read step N's results after step N+1 was launched.
  DeviceMem sample_work, sample_params, sample_entries, sample_results;
  std::array<HostMem, kSampleSlots> host_params, host_entries, host_results;
  std::array<int32_t, kSampleSlots> slot_rows{};
  std::vector<int32_t> marks;  // per-vocab scratch for de-duplicating a row's token entries
  std::vector<cuda::SamplerTokenEntry> entries;  // reused: no allocation per step

  // Op timing.
  bool timing = false;
  std::vector<cudaEvent_t> events;  // pairs
  std::vector<OpTiming> timed;

  ~Impl() {
    for (cudaEvent_t e : events) cudaEventDestroy(e);
    gemm.reset();
    if (fork_event) cudaEventDestroy(fork_event);
    if (join_event) cudaEventDestroy(join_event);
    if (side_stream) cudaStreamDestroy(side_stream);
    if (stream) cudaStreamDestroy(stream);
  }
};

// Records CUDA events around one op when timing is on.
class CudaBackend::OpScope {
 public:
  OpScope(Impl& impl, const char* op, double bytes, double flops, const std::string& detail = {}) : impl_(impl) {
    if (!impl_.timing || impl_.timed.size() >= kMaxTimedOps) return;
    index_ = static_cast<int>(impl_.timed.size());
    impl_.timed.push_back({detail.empty() ? std::string(op) : absl::StrCat(op, " ", detail), 0.0f, bytes, flops});
    Record(impl_.events[2 * index_]);
  }
  ~OpScope() {
    if (index_ >= 0) Record(impl_.events[2 * index_ + 1]);
  }

 private:
  // While capturing, an external record becomes an event node of the graph, so that replays time
  // each op of the graph.
  void Record(cudaEvent_t e) {
    if (impl_.capturing) cudaEventRecordWithFlags(e, impl_.stream, cudaEventRecordExternal);
    else cudaEventRecord(e, impl_.stream);
  }

  Impl& impl_;
  int index_ = -1;
};

CudaBackend::CudaBackend(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CudaBackend::~CudaBackend() = default;

absl::StatusOr<std::unique_ptr<CudaBackend>> CudaBackend::Create(const CudaBackendOptions& options) {
  if (options.dtype != DType::kBF16 && options.dtype != DType::kF16 && options.dtype != DType::kF32)
    return absl::InvalidArgumentError(absl::StrCat("CUDA backend: unsupported dtype ",
                                                   std::string(DTypeName(options.dtype)), " (bf16, fp16 or fp32)"));
  // Checked before looking for a GPU, so that a bad flag is reported as such on any machine.
  if (!(options.memory_fraction > 0.0 && options.memory_fraction <= 1.0))  // also rejects NaN
    return absl::InvalidArgumentError(
        absl::StrCat("CUDA backend: the GPU memory fraction (--gpu-memory-fraction) must be in (0, 1], got ",
                     options.memory_fraction));
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess || count == 0)
    return absl::UnavailableError(absl::StrCat("CUDA backend: no usable GPU (",
                                               err != cudaSuccess ? cudaGetErrorString(err) : "0 devices", ")"));
  if (options.device_index < 0 || options.device_index >= count)
    return absl::InvalidArgumentError(
        absl::StrCat("CUDA backend: device ", options.device_index, " does not exist (", count, " GPUs)"));
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  impl->linears = std::make_unique<LinearKernels>(impl->options);
  // Benchmark knobs for the GEMV's shared-memory ring form (launch/README.md lists them).
  if (const char* v = std::getenv("LLM_GEMV_SMEM_RING"); v != nullptr && v[0] == '0') impl->options.gemv_smem_ring = false;
  // LLM_TUNE_CUBLAS=0: no tuning; =N (> 1): tune linears of up to N rows; LLM_TUNE_CUBLAS_CANDIDATES.
  if (const char* v = std::getenv("LLM_TUNE_CUBLAS"); v != nullptr)
    impl->options.tune_cublas_max_rows = std::atoi(v) > 1 ? std::atoi(v) : (v[0] == '0' ? 0 : impl->options.tune_cublas_max_rows);
  if (const char* v = std::getenv("LLM_TUNE_CUBLAS_CANDIDATES"); v != nullptr && std::atoi(v) > 0)
    impl->options.tune_cublas_candidates = std::atoi(v);
  if (const char* v = std::getenv("LLM_GEMM_FEW_ROWS"); v != nullptr) impl->options.gemm_few_rows_max_rows = std::atoi(v);
  if (const char* v = std::getenv("LLM_GEMM_FP8_WGMMA"); v != nullptr) impl->options.gemm_fp8_wgmma_max_rows = std::atoi(v);
  if (const char* v = std::getenv("LLM_FP8_W8A8_GEMV"); v != nullptr)
    impl->options.fp8_w8a8_gemv_max_rows = std::atoi(v);
  if (const char* v = std::getenv("LLM_FP8_W8A8_GEMV_MIN"); v != nullptr)
    impl->options.fp8_w8a8_gemv_min_rows = std::atoi(v);
  if (const char* v = std::getenv("LLM_FP8_GEMV_MAX_ROWS"); v != nullptr) impl->options.fp8_gemv_max_rows = std::atoi(v);
  if (const char* v = std::getenv("LLM_FP8_FUSED_QUANT"); v != nullptr && v[0] == '0')
    impl->options.fuse_fp8_input_quant = false;
  if (const char* v = std::getenv("LLM_FP8_FAST_ACCUM"); v != nullptr && v[0] == '0')
    impl->options.fp8_fast_accumulation = false;
  if (const char* v = std::getenv("LLM_FP8_SPLIT_SCALES"); v != nullptr && v[0] == '0')
    impl->options.fp8_split_scales = false;
  if (const char* v = std::getenv("LLM_FP8_PENDING_SCALES"); v != nullptr && v[0] == '0')
    impl->options.fp8_pending_scales = false;
  if (const char* v = std::getenv("LLM_FUSE_GATE_UP_SILU"); v != nullptr && v[0] == '0')
    impl->options.fuse_gate_up_silu = false;
  if (const char* v = std::getenv("LLM_FUSE_DECODE_OPS"); v != nullptr && v[0] == '0') impl->options.fuse_decode_ops = false;
  if (const char* v = std::getenv("LLM_FUSE_GEMV_NORM"); v != nullptr) impl->options.fuse_gemv_norm = v[0] != '0';
  if (const char* v = std::getenv("LLM_FUSE_GEMV_ROPE"); v != nullptr) impl->options.fuse_gemv_rope = v[0] != '0';
  if (const char* v = std::getenv("LLM_FUSE_REORDERED_NORM"); v != nullptr)
    impl->options.fuse_reordered_norm = v[0] != '0';
  if (const char* v = std::getenv("LLM_ATTENTION_SPLITS"); v != nullptr) impl->options.attention_splits = std::atoi(v);
  if (const char* v = std::getenv("LLM_ATTENTION_BLOCKS_PER_SM"); v != nullptr)
    impl->options.attention_blocks_per_sm = std::atoi(v);
  if (const char* v = std::getenv("LLM_ATTENTION_FP8_OT"); v != nullptr)
    impl->options.attention_fp8_transposed_o = v[0] != '0';
  if (const char* v = std::getenv("LLM_GEMM_FEW_ROWS_16BIT"); v != nullptr)
    impl->options.gemm_few_rows_16bit_max_rows = std::atoi(v);
  if (const char* v = std::getenv("LLM_GEMM_FEW_ROWS_INT4"); v != nullptr) {
    int lo = 0, hi = 0;
    if (std::sscanf(v, "%d,%d", &lo, &hi) == 2)
      impl->options.gemm_few_rows_int4_min_rows = lo, impl->options.gemm_few_rows_int4_max_rows = hi;
  }
  if (const char* v = std::getenv("LLM_GEMM_W4A16_WGMMA"); v != nullptr) {
    int lo = 0, hi = 0;
    if (std::sscanf(v, "%d,%d", &lo, &hi) == 2)
      impl->options.gemm_w4a16_wgmma_min_rows = lo, impl->options.gemm_w4a16_wgmma_max_rows = hi;
  }
  if (const char* v = std::getenv("LLM_GEMM_FEW_ROWS_TILE"); v != nullptr) impl->options.gemm_few_rows_tile_rows = std::atoi(v);
  if (const char* v = std::getenv("LLM_GEMM_FEW_ROWS_SPLIT"); v != nullptr)
    impl->options.gemm_few_rows_token_split = std::atoi(v);
  if (const char* v = std::getenv("LLM_GEMM_FEW_ROWS_STEP"); v != nullptr) impl->options.gemm_few_rows_step_cols = std::atoi(v);
  if (const char* v = std::getenv("LLM_GEMV_RING_KB"); v != nullptr && std::atoi(v) > 0)
    impl->options.gemv_ring_bytes = static_cast<size_t>(std::atoi(v)) << 10;
  CUDA_RETURN_IF_ERROR(cudaSetDevice(options.device_index));
  CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&impl->prop, options.device_index));
  int memory_khz = 0, bus_bits = 0;
  CUDA_RETURN_IF_ERROR(cudaDeviceGetAttribute(&memory_khz, cudaDevAttrMemoryClockRate, options.device_index));
  CUDA_RETURN_IF_ERROR(cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, options.device_index));
  impl->dram_bytes_per_second = 2.0 * 1e3 * memory_khz * bus_bits / 8;  // two transfers a clock
  CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&impl->stream, cudaStreamNonBlocking));
  CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&impl->side_stream, cudaStreamNonBlocking));
  CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&impl->fork_event, cudaEventDisableTiming));
  CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&impl->join_event, cudaEventDisableTiming));
  DeviceArenaOptions arena;
  arena.device_index = options.device_index;
  arena.device_name = impl->prop.name;
  arena.memory_fraction = options.memory_fraction;
  ASSIGN_OR_RETURN(impl->arena, DeviceArena::Create(arena));
  RETURN_IF_ERROR(
      impl->gemm_workspace.Ensure(*impl->arena, options.gemm_workspace_bytes, "the cuBLASLt workspace"));
  RETURN_IF_ERROR(impl->attention_workspace.Ensure(*impl->arena, options.attention_workspace_bytes,
                                                   "the attention workspace"));
  if (options.dtype != DType::kF32) {  // FP8 and int4 linears run with 16-bit activations only
    RETURN_IF_ERROR(impl->fp8_workspace.Ensure(*impl->arena, options.fp8_workspace_bytes,
                                               "the FP8 activation workspace"));
    RETURN_IF_ERROR(impl->unit_scale.Ensure(*impl->arena, 256, "the FP8 GEMMs' unit scale"));
    const float one = 1.0f;
    CUDA_RETURN_IF_ERROR(cudaMemcpy(impl->unit_scale.ptr(), &one, sizeof(one), cudaMemcpyHostToDevice));
    RETURN_IF_ERROR(impl->few_rows_workspace.Ensure(
        *impl->arena,
        std::max(cuda::GemmFewRowsWorkspaceBytes(impl->prop.multiProcessorCount),
                 cuda::GemmFp8WgmmaWorkspaceBytes(impl->prop.multiProcessorCount)),
        "the stream-K GEMMs' sums"));
  }
  // The decode attention's and the stream-K GEMMs' counters start at zero (each call leaves them so).
  for (DeviceMem* zeroed : {&impl->attention_workspace, &impl->few_rows_workspace})
    if (zeroed->bytes() > 0) CUDA_RETURN_IF_ERROR(cudaMemsetAsync(zeroed->ptr(), 0, zeroed->bytes(), impl->stream));
  CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(impl->stream));
  ASSIGN_OR_RETURN(impl->gemm,
                   cuda::CublasLtGemm::Create(impl->gemm_workspace.ptr(), impl->gemm_workspace.bytes()));
  return std::unique_ptr<CudaBackend>(new CudaBackend(std::move(impl)));
}

Device CudaBackend::device() const { return Device{DeviceKind::kCuda, impl_->options.device_index}; }
DType CudaBackend::activation_dtype() const { return impl_->options.dtype; }
CUstream_st* CudaBackend::stream() const { return impl_->stream; }
const CudaBackendOptions& CudaBackend::options() const { return impl_->options; }
CudaBackendOptions& CudaBackend::mutable_options() { return impl_->options; }
std::string CudaBackend::device_name() const { return impl_->prop.name; }
int CudaBackend::num_sms() const { return impl_->prop.multiProcessorCount; }

DeviceArenaStats CudaBackend::memory_stats() const { return impl_->arena->stats(); }

absl::StatusOr<Buffer> CudaBackend::Allocate(size_t bytes) { return impl_->arena->Allocate(bytes); }

absl::StatusOr<size_t> CudaBackend::FreeMemory() const { return impl_->arena->largest_free(); }

absl::Status CudaBackend::CopyToDevice(Tensor dst, const void* src) {
  if (dst.bytes() == 0) return absl::OkStatus();
  CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dst.data(), src, dst.bytes(), cudaMemcpyHostToDevice, impl_->stream));
  return absl::OkStatus();
}

absl::Status CudaBackend::CopyToHost(void* dst, Tensor src) {
  if (src.bytes() == 0) return absl::OkStatus();
  CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dst, src.data(), src.bytes(), cudaMemcpyDeviceToHost, impl_->stream));
  return absl::OkStatus();
}

absl::Status CudaBackend::UploadConverted(const void* src, DType src_dtype, Tensor dst) {
  if (src_dtype != DType::kF32 && src_dtype != DType::kF16 && src_dtype != DType::kBF16)
    return absl::InvalidArgumentError(absl::StrCat("UploadConverted: cannot convert ",
                                                   std::string(DTypeName(src_dtype))));
  if (dst.numel() == 0) return absl::OkStatus();
  if (src_dtype == dst.dtype()) return CopyToDevice(dst, src);
  // Stage the source bytes on the device and convert there (start-up only). The staging stays
  // outside the arena, in CUDA's stream-ordered pool: it lives only while one tensor converts (it is
  // freed, stream-ordered, right after), so it borrows the headroom the arena leaves for a moment
  // rather than raising the arena's high-water mark, and the pool hands it back to the device at the
  // next synchronization. A tensor larger than that headroom fails here, with a message saying so.
  const size_t bytes = static_cast<size_t>(dst.numel()) * DTypeSize(src_dtype);
  void* staging = nullptr;
  const cudaError_t err = cudaMallocAsync(&staging, bytes, impl_->stream);
  if (err == cudaErrorMemoryAllocation) {
    cudaGetLastError();  // not sticky: clear it, so that later calls do not report it again
    return absl::ResourceExhaustedError(absl::StrCat(
        "UploadConverted: cannot stage ", FormatBytes(bytes), " of ", std::string(DTypeName(src_dtype)),
        " weights for conversion on cuda:", impl_->options.device_index, " outside the memory arena (",
        impl_->arena->stats().ToString(), "): lower --gpu-memory-fraction to leave more room"));
  }
  CUDA_RETURN_IF_ERROR(err);
  CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(staging, src, bytes, cudaMemcpyHostToDevice, impl_->stream));
  const absl::Status st = cuda::LaunchConvert(src_dtype, staging, dst.dtype(), dst.data(), dst.numel(), impl_->stream);
  CUDA_RETURN_IF_ERROR(cudaFreeAsync(staging, impl_->stream));
  return st;
}

absl::Status CudaBackend::Synchronize() {
  CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(impl_->stream));
  return absl::OkStatus();
}

namespace {

// Checks that every non-empty tensor is on this GPU in `dtype`.
absl::Status ExpectOnDevice(const char* op, Device dev, DType dtype, std::initializer_list<const Tensor*> ts) {
  for (const Tensor* t : ts) {
    if (t->empty()) continue;
    if (t->device() != dev)
      return absl::InvalidArgumentError(absl::StrCat(op, ": tensor is not on cuda:", dev.index));
    if (t->dtype() != dtype)
      return absl::InvalidArgumentError(absl::StrCat(op, ": expected ", std::string(DTypeName(dtype)), ", got ",
                                                     std::string(DTypeName(t->dtype()))));
  }
  return absl::OkStatus();
}

absl::Status ExpectI32(const char* op, Device dev, std::initializer_list<const Tensor*> ts) {
  return ExpectOnDevice(op, dev, DType::kI32, ts);
}

// The KV cache: both tensors in the activation dtype, or both FP8 E4M3 with positive scales.
absl::Status ExpectCache(const char* op, Device dev, DType act, const KvCacheLayer& c) {
  const DType t = c.k.dtype() == DType::kF8E4M3 && act != DType::kF32 ? DType::kF8E4M3 : act;
  RETURN_IF_ERROR(ExpectOnDevice(op, dev, t, {&c.k, &c.v}));
  if (t == DType::kF8E4M3 && !(c.k_scale > 0.0f && c.v_scale > 0.0f && std::isfinite(c.k_scale) &&
                               std::isfinite(c.v_scale)))
    return absl::InvalidArgumentError(absl::StrCat(op, ": FP8 KV cache scales must be positive"));
  return absl::OkStatus();
}

}  // namespace

absl::Status CudaBackend::Embedding(Tensor table, Tensor ids, int64_t vocab_offset, Tensor out) {
  const DType dt = activation_dtype();
  RETURN_IF_ERROR(ExpectOnDevice("Embedding", device(), dt, {&table, &out}));
  RETURN_IF_ERROR(ExpectI32("Embedding", device(), {&ids}));
  RETURN_IF_ERROR(Expect(table.rank() == 2 && out.dim(0) == ids.numel() && out.numel() == ids.numel() * table.dim(1),
                         "Embedding", "shape mismatch"));
  OpScope scope(*impl_, "Embedding", 2.0 * out.bytes(), 0);
  return cuda::LaunchEmbedding(dt, table.data(), table.dim(0), table.dim(1), ids.data_as<const int32_t>(), ids.numel(),
                               vocab_offset, out.data(), impl_->stream);
}

absl::Status CudaBackend::RmsNorm(Tensor x, Tensor weight, float eps, Tensor out) {
  const DType dt = activation_dtype();
  RETURN_IF_ERROR(ExpectOnDevice("RmsNorm", device(), dt, {&x, &weight, &out}));
  const int64_t dim = weight.numel();
  RETURN_IF_ERROR(Expect(dim > 0 && x.numel() % dim == 0 && out.numel() == x.numel(), "RmsNorm", "shape mismatch"));
  OpScope scope(*impl_, "RmsNorm", 2.0 * x.bytes() + weight.bytes(), 0);
  return cuda::LaunchRmsNorm(dt, x.data(), nullptr, nullptr, weight.data(), out.data(), x.numel() / dim, dim, eps,
                             impl_->stream, impl_->options.programmatic_launch);
}

absl::Status CudaBackend::AddRmsNorm(Tensor residual, Tensor delta, Tensor weight, float eps, Tensor out) {
  return RunAddRmsNorm("AddRmsNorm", residual, delta, weight, eps, out, nullptr, nullptr);
}

absl::Status CudaBackend::AddRmsNormFp8(Tensor residual, Tensor delta, Tensor weight, float eps, Tensor out,
                                        const LinearWeight& consumer, Fp8Input quantized) {
  return RunAddRmsNorm("AddRmsNormFp8", residual, delta, weight, eps, out, &consumer, &quantized);
}

absl::Status CudaBackend::RunAddRmsNorm(const char* op, Tensor residual, Tensor delta, Tensor weight, float eps,
                                        Tensor out, const LinearWeight* consumer, const Fp8Input* quantized) {
  const DType dt = activation_dtype();
  RETURN_IF_ERROR(ExpectOnDevice(op, device(), dt, {&residual, &delta, &weight, &out}));
  const int64_t dim = weight.numel();
  RETURN_IF_ERROR(Expect(dim > 0 && residual.numel() % dim == 0 && out.numel() == residual.numel() &&
                             (delta.empty() || delta.numel() == residual.numel()),
                         op, "shape mismatch"));
  std::optional<cuda::Fp8RowOutput> q;
  if (quantized != nullptr) {
    ASSIGN_OR_RETURN(q, Fp8RowOutputFor(op, out, *consumer, *quantized));
  }
  OpScope scope(*impl_, op,
                (delta.empty() ? 2.0 : 4.0) * residual.bytes() + weight.bytes() +
                    (quantized ? quantized->values.bytes() : 0),
                0);
  return cuda::LaunchRmsNorm(dt, nullptr, residual.data(), delta.empty() ? nullptr : delta.data(), weight.data(),
                             out.data(), residual.numel() / dim, dim, eps, impl_->stream,
                             impl_->options.programmatic_launch, q ? &*q : nullptr);
}

absl::Status CudaBackend::Add(Tensor x, Tensor y) {
  const DType dt = activation_dtype();
  RETURN_IF_ERROR(ExpectOnDevice("Add", device(), dt, {&x, &y}));
  RETURN_IF_ERROR(Expect(x.numel() == y.numel(), "Add", "shape mismatch"));
  OpScope scope(*impl_, "Add", 3.0 * x.bytes(), 0);
  return cuda::LaunchAdd(dt, x.data(), y.data(), x.numel(), impl_->stream);
}

namespace {
// The shape and kernel of a linear op in per-op timings (empty when not timing).
std::string LinearTimingDetail(bool timing, const LinearCall& call, LinearKernelChoice choice) {
  return timing ? absl::StrCat(call.n, "x", call.k, " ", std::string(choice.Name())) : std::string();
}
}  // namespace

absl::Status CudaBackend::Linear(Tensor x, const LinearWeight& w, Tensor out) {
  return RunLinear(x, w, out, nullptr);
}

absl::Status CudaBackend::LinearFp8Input(Tensor x, Fp8Input quantized, const LinearWeight& w, Tensor out) {
  const int64_t k = w.in_features(), m = k > 0 ? x.numel() / k : 0;
  RETURN_IF_ERROR(Expect(m * k == x.numel() && TakesFp8Input(w, m), "LinearFp8Input",
                         "the weight does not take an FP8 input here"));
  RETURN_IF_ERROR(ValidateFp8Input("LinearFp8Input", quantized, w, m, k));
  return RunLinear(x, w, out, &quantized);
}

absl::Status CudaBackend::RunLinear(Tensor x, const LinearWeight& w, Tensor out, const Fp8Input* quantized) {
  ASSIGN_OR_RETURN(const LinearCall call, CheckLinear(x, w, out, quantized));
  const LinearContext ctx = linear_context();
  ASSIGN_OR_RETURN(const LinearKernelChoice choice, impl_->linears->Choose(call, ctx));
  OpScope scope(*impl_, "Linear",
                static_cast<double>(w.weight.bytes() + x.bytes() + out.bytes() + w.bias.bytes()),
                2.0 * call.m * call.n * call.k, LinearTimingDetail(impl_->timing, call, choice));
  return impl_->linears->Run(call, choice, ctx);
}

absl::Status CudaBackend::LinearSiluMul(Tensor x, const LinearWeight& w, Tensor gate_up, Tensor out) {
  ASSIGN_OR_RETURN(const LinearCall plain, CheckLinear(x, w, gate_up, nullptr));
  const DType dt = activation_dtype();
  RETURN_IF_ERROR(ExpectOnDevice("LinearSiluMul", device(), dt, {&out}));
  RETURN_IF_ERROR(Expect(plain.n % 2 == 0 && out.numel() * 2 == gate_up.numel(), "LinearSiluMul",
                         absl::StrCat("gate/up ", gate_up.shape().ToString(), " -> out ", out.shape().ToString())));
  const LinearContext ctx = linear_context();
  // Chosen for the plain call (a per-shape timing writes the whole [m, 2F] product).
  ASSIGN_OR_RETURN(const LinearKernelChoice choice, impl_->linears->Choose(plain, ctx));
  LinearCall fused = plain;
  fused.out = out;
  fused.glu_cols = plain.n / 2;
  const double bytes = static_cast<double>(w.weight.bytes() + x.bytes() + w.bias.bytes());
  const double flops = 2.0 * plain.m * plain.n * plain.k;
  const std::string detail = LinearTimingDetail(impl_->timing, plain, choice);
  if (impl_->options.fuse_gate_up_silu && impl_->linears->TakesGlu(fused, choice, ctx)) {
    OpScope scope(*impl_, "LinearSiluMul", bytes + static_cast<double>(out.bytes()), flops, detail);
    return impl_->linears->Run(fused, choice, ctx);
  }
  {
    OpScope scope(*impl_, "Linear", bytes + static_cast<double>(gate_up.bytes()), flops, detail);
    RETURN_IF_ERROR(impl_->linears->Run(plain, choice, ctx));
  }
  return SiluMul(gate_up, out);
}

bool CudaBackend::LinearFuses(const LinearWeight& w, int64_t rows, bool norm, bool add,
                              const cuda::QkvRopeParams* rope) const {
  const CudaBackendOptions& o = impl_->options;
  if (!o.fuse_decode_ops || rows <= 0 || ((norm || add) && !o.fuse_gemv_norm) || (rope && !o.fuse_gemv_rope))
    return false;
  LinearCall call = PlannedLinear(w, rows);
  call.rope = rope;
  return impl_->linears->FusesChosen(call, norm, add, linear_context());
}

LinearCall CudaBackend::PlannedLinear(const LinearWeight& w, int64_t rows) const {
  const DType dt = activation_dtype();
  return LinearCall{
      Tensor(),        &w, Tensor(nullptr, dt, {rows, w.out_features()}, device()), rows, w.out_features(),
      w.in_features(), dt};
}

bool CudaBackend::FusesRmsNormInto(const LinearWeight& w, int64_t rows) const {
  return LinearFuses(w, rows, /*norm=*/true, /*add=*/false);
}

bool CudaBackend::AddsIntoResidual(const LinearWeight& w, int64_t rows) const {
  return LinearFuses(w, rows, /*norm=*/false, /*add=*/true);
}

absl::Status CudaBackend::RmsNormLinear(Tensor x, Tensor norm_weight, float eps, Tensor normed, const LinearWeight& w,
                                        Tensor out, Tensor act) {
  const DType dt = activation_dtype();
  RETURN_IF_ERROR(ExpectOnDevice("RmsNormLinear", device(), dt, {&x, &norm_weight, &normed, &act}));
  RETURN_IF_ERROR(Expect(norm_weight.numel() == w.in_features() && normed.numel() == x.numel(), "RmsNormLinear",
                         absl::StrCat("norm of ", norm_weight.numel(), " for a linear of ", w.in_features(),
                                      " inputs (x ", x.shape().ToString(), ")")));
  ASSIGN_OR_RETURN(LinearCall call, CheckLinear(x, w, out, nullptr));
  const LinearContext ctx = linear_context();
  ASSIGN_OR_RETURN(const LinearKernelChoice choice, impl_->linears->Choose(call, ctx));
  call.norm = cuda::FusedRmsNorm{norm_weight.data(), eps};
  LinearCall glu = call;
  if (!act.empty()) {
    RETURN_IF_ERROR(ExpectOnDevice("RmsNormLinear", device(), dt, {&out}));
    RETURN_IF_ERROR(Expect(call.n % 2 == 0 && act.numel() * 2 == out.numel(), "RmsNormLinear",
                           absl::StrCat("gate/up ", out.shape().ToString(), " -> act ", act.shape().ToString())));
    glu.out = act;
    glu.glu_cols = call.n / 2;
  }
  const bool glu_fused = act.empty() || (impl_->options.fuse_gate_up_silu && impl_->linears->TakesGlu(glu, choice, ctx));
  if (!impl_->options.fuse_decode_ops || !impl_->options.fuse_gemv_norm)
    return Backend::RmsNormLinear(x, norm_weight, eps, normed, w, out, act);  // the ops apart
  // A gate/up projection whose kernel has no gate/up form here (the int4 GEMV at 17-32 rows) but
  // takes the norm: the norm in the linear, then SiluMul apart (FusesRmsNormInto said yes for it).
  const bool with_glu = glu_fused && impl_->linears->Fuses(glu, choice, /*norm=*/true, /*add=*/false, ctx);
  const LinearCall& fused = with_glu ? glu : call;
  if (!with_glu && (act.empty() || !impl_->linears->Fuses(call, choice, /*norm=*/true, /*add=*/false, ctx)))
    return Backend::RmsNormLinear(x, norm_weight, eps, normed, w, out, act);
  {
    OpScope scope(*impl_, with_glu && !act.empty() ? "RmsNormLinearSiluMul" : "RmsNormLinear",
                  static_cast<double>(w.weight.bytes() + x.bytes() + fused.out.bytes() + w.bias.bytes()),
                  2.0 * call.m * call.n * call.k, LinearTimingDetail(impl_->timing, call, choice));
    RETURN_IF_ERROR(impl_->linears->Run(fused, choice, ctx));
  }
  return with_glu || act.empty() ? absl::OkStatus() : SiluMul(out, act);
}

absl::Status CudaBackend::LinearAddInto(Tensor x, const LinearWeight& w, Tensor residual, Tensor delta) {
  RETURN_IF_ERROR(ExpectOnDevice("LinearAddInto", device(), activation_dtype(), {&residual, &delta}));
  RETURN_IF_ERROR(Expect(residual.numel() == delta.numel(), "LinearAddInto", "residual and delta differ in size"));
  // Chosen for the product into `delta`: a first eager call may time kernels on its operands, which
  // write their output (the residual must not be).
  ASSIGN_OR_RETURN(LinearCall call, CheckLinear(x, w, delta, nullptr));
  const LinearContext ctx = linear_context();
  ASSIGN_OR_RETURN(const LinearKernelChoice choice, impl_->linears->Choose(call, ctx));
  call.out = residual;
  call.add_to_out = true;
  if (!impl_->options.fuse_decode_ops || !impl_->options.fuse_gemv_norm ||
      !impl_->linears->Fuses(call, choice, /*norm=*/false, /*add=*/true, ctx))
    return Backend::LinearAddInto(x, w, residual, delta);  // the ops apart
  OpScope scope(*impl_, "LinearAddInto",
                static_cast<double>(w.weight.bytes() + x.bytes() + 2 * residual.bytes() + w.bias.bytes()),
                2.0 * call.m * call.n * call.k, LinearTimingDetail(impl_->timing, call, choice));
  return impl_->linears->Run(call, choice, ctx);
}

absl::StatusOr<LinearCall> CudaBackend::CheckLinear(Tensor x, const LinearWeight& w, Tensor out,
                                                    const Fp8Input* quantized) {
  const DType dt = activation_dtype();
  RETURN_IF_ERROR(ExpectOnDevice("Linear", device(), dt, {&x, &w.bias}));
  if (w.format.int4()) {  // f16 scales, u8 zeros and codes, i32 chunk groups and permutation
    RETURN_IF_ERROR(w.ValidateInt4("Linear"));
    RETURN_IF_ERROR(ExpectOnDevice("Linear", device(), DType::kF16, {&w.scale}));
    RETURN_IF_ERROR(ExpectOnDevice("Linear", device(), DType::kU8, {&w.zero}));
    RETURN_IF_ERROR(ExpectOnDevice("Linear", device(), DType::kI32, {&w.chunk_group, &w.input_perm}));
  } else {
    RETURN_IF_ERROR(ExpectOnDevice("Linear", device(), DType::kF32, {&w.scale, &w.input_scale}));
  }
  RETURN_IF_ERROR(Expect(!w.format.scaled() || w.format.int4() || w.scale.numel() == w.scale_grid().numel(), "Linear",
                         absl::StrCat("scale of ", w.scale.numel(), " elements for ", w.format.ToString(), " weights ",
                                      w.weight.shape().ToString())));
  RETURN_IF_ERROR(Expect(w.input_quant != ActivationQuant::kStaticPerTensor || w.input_scale.numel() == 1, "Linear",
                         "static activation quantization without an input scale"));
  RETURN_IF_ERROR(Expect(SupportsLinearFormat(w.format) && w.weight.dtype() == StoredDType(w.format.element) &&
                             w.weight.device() == device(),
                         "Linear",
                         absl::StrCat("weights of format ", w.format.ToString(), " stored as ",
                                      std::string(DTypeName(w.weight.dtype())), " are not taken by the ",
                                      std::string(DTypeName(dt)), " backend")));
  RETURN_IF_ERROR(Expect(out.dtype() == dt || out.dtype() == DType::kF32, "Linear",
                         "output must be in the activation dtype or float32"));
  RETURN_IF_ERROR(Expect(out.device() == device(), "Linear", "output is not on this GPU"));
  const int64_t n = w.out_features(), k = w.in_features();
  RETURN_IF_ERROR(Expect(w.weight.rank() == 2 && k > 0 && x.numel() % k == 0 && out.numel() == x.numel() / k * n &&
                             (w.bias.empty() || w.bias.numel() == n),
                         "Linear",
                         absl::StrCat("x ", x.shape().ToString(), " · W ", w.weight.shape().ToString(), " -> out ",
                                      out.shape().ToString())));
  return LinearCall{x, &w, out, x.numel() / k, n, k, dt, quantized};
}

LinearContext CudaBackend::linear_context() const {
  LinearContext ctx;
  ctx.stream = impl_->stream;
  ctx.num_sms = impl_->prop.multiProcessorCount;
  ctx.l2_bytes = impl_->prop.l2CacheSize;
  ctx.dram_bytes_per_second = impl_->dram_bytes_per_second;
  ctx.gemm = impl_->gemm.get();
  ctx.fp8_workspace = impl_->fp8_workspace.ptr();
  ctx.fp8_workspace_bytes = impl_->fp8_workspace.bytes();
  ctx.few_rows_workspace = impl_->few_rows_workspace.ptr();
  ctx.few_rows_workspace_bytes = impl_->few_rows_workspace.bytes();
  ctx.capturing = impl_->capturing;
  ctx.timing = impl_->timing;
  ctx.tuning_pass = impl_->tuning_pass;
  ctx.fp8_fast_accumulation = impl_->options.fp8_fast_accumulation;
  ctx.unit_scale = static_cast<const float*>(impl_->unit_scale.ptr());
  return ctx;
}

void CudaBackend::SetTuningPass(bool on) { impl_->tuning_pass = on; }

bool CudaBackend::SupportsLinearFormat(const StorageFormat& f) const {
  const DType dt = activation_dtype();
  if (f == StorageFormat::Float(dt)) return true;
  // Int4 with float16 scales (exact for AWQ's and GPTQ's), 16-bit activations (W4A16).
  if (f.int4()) return dt != DType::kF32 && f == StorageFormat::Int4(f.zero_points, DType::kF16);
  if (f.element != DType::kF8E4M3 || dt == DType::kF32) return false;
  switch (f.granularity) {
    case ScaleGranularity::kTensor:
    case ScaleGranularity::kChannel: return true;
    case ScaleGranularity::kBlock: return f.block_rows == 128 && f.block_cols == 128;
    case ScaleGranularity::kGroup: return f.block_cols == 128;
    case ScaleGranularity::kNone:
    case ScaleGranularity::kChunkGroup: return false;
  }
  return false;
}

bool CudaBackend::SupportsKvCacheDType(DType t) const {
  const DType dt = activation_dtype();
  return t == dt || (t == DType::kF8E4M3 && dt != DType::kF32);
}

absl::StatusOr<cuda::QkvRopeParams> CudaBackend::QkvRopeParamsOf(const QkvRopeArgs& a) const {
  const DType dt = activation_dtype();
  RETURN_IF_ERROR(ExpectOnDevice("QkvRope", device(), dt, {&a.qkv, &a.q_norm, &a.k_norm, &a.q_out}));
  RETURN_IF_ERROR(ExpectCache("QkvRope", device(), dt, a.cache));
  RETURN_IF_ERROR(ExpectI32("QkvRope", device(), {&a.positions, &a.slot_mapping}));
  RETURN_IF_ERROR(ExpectOnDevice("QkvRope", device(), DType::kF32, {&a.rope.inv_freq}));
  const int64_t t = a.qkv.rank() > 0 ? a.qkv.dim(0) : 0;
  RETURN_IF_ERROR(Expect(a.head_dim > 0 && a.rope.rotary_dim <= a.head_dim && a.rope.rotary_dim % 2 == 0 &&
                             a.qkv.numel() == t * (a.num_heads + 2 * a.num_kv_heads) * a.head_dim &&
                             a.q_out.numel() == t * a.num_heads * a.head_dim && a.positions.numel() >= t &&
                             a.slot_mapping.numel() >= t && a.cache.k.rank() == 4 &&
                             a.cache.k.dim(1) == a.num_kv_heads && a.cache.k.dim(3) == a.head_dim &&
                             a.cache.v.shape() == a.cache.k.shape() &&
                             (a.q_norm.empty() || a.q_norm.numel() == a.head_dim) &&
                             (a.k_norm.empty() || a.k_norm.numel() == a.head_dim) &&
                             (a.rope.rotary_dim == 0 || a.rope.inv_freq.numel() >= a.rope.rotary_dim / 2),
                         "QkvRope", "shape mismatch"));
  cuda::QkvRopeParams p;
  p.qkv = a.qkv.data();
  p.q_out = a.q_out.data();
  p.k_cache = a.cache.k.data();
  p.v_cache = a.cache.v.data();
  p.q_norm = a.q_norm.empty() ? nullptr : a.q_norm.data();
  p.k_norm = a.k_norm.empty() ? nullptr : a.k_norm.data();
  p.inv_freq = a.rope.inv_freq.empty() ? nullptr : a.rope.inv_freq.data_as<const float>();
  p.positions = a.positions.data_as<const int32_t>();
  p.slot_mapping = a.slot_mapping.data_as<const int32_t>();
  p.num_tokens = t;
  p.num_heads = a.num_heads;
  p.num_kv_heads = a.num_kv_heads;
  p.head_dim = a.head_dim;
  p.rotary_dim = a.rope.rotary_dim;
  p.block_size = a.cache.block_size();
  p.norm_eps = a.norm_eps;
  p.attention_scaling = a.rope.attention_scaling;
  p.fp8_cache = a.cache.k.dtype() == DType::kF8E4M3;
  p.k_scale = a.cache.k_scale;
  p.v_scale = a.cache.v_scale;
  return p;
}

absl::Status CudaBackend::QkvRope(const QkvRopeArgs& a) {
  ASSIGN_OR_RETURN(const cuda::QkvRopeParams p, QkvRopeParamsOf(a));
  OpScope scope(*impl_, "QkvRope", 2.0 * a.qkv.bytes(), 0);
  return cuda::LaunchQkvRope(activation_dtype(), p, impl_->stream, impl_->options.programmatic_launch);
}

bool CudaBackend::FusesQkvRope(const LinearWeight& w, const QkvRopeArgs& rope, int64_t rows) const {
  const absl::StatusOr<cuda::QkvRopeParams> p = QkvRopeParamsOf(rope);
  return p.ok() && LinearFuses(w, rows, /*norm=*/false, /*add=*/false, &*p);
}

absl::Status CudaBackend::LinearQkvRope(Tensor x, Tensor norm_weight, float eps, Tensor normed, const LinearWeight& w,
                                        const QkvRopeArgs& rope) {
  ASSIGN_OR_RETURN(const cuda::QkvRopeParams p, QkvRopeParamsOf(rope));
  const bool norm = !norm_weight.empty();
  if (norm) {
    RETURN_IF_ERROR(ExpectOnDevice("LinearQkvRope", device(), activation_dtype(), {&norm_weight, &normed}));
    RETURN_IF_ERROR(Expect(norm_weight.numel() == w.in_features() && normed.numel() == x.numel(), "LinearQkvRope",
                           "norm weight or scratch mismatch"));
  }
  ASSIGN_OR_RETURN(LinearCall call, CheckLinear(x, w, rope.qkv, nullptr));
  const LinearContext ctx = linear_context();
  ASSIGN_OR_RETURN(const LinearKernelChoice choice, impl_->linears->Choose(call, ctx));
  if (norm) call.norm = cuda::FusedRmsNorm{norm_weight.data(), eps};
  call.rope = &p;
  if (!impl_->options.fuse_decode_ops || !impl_->options.fuse_gemv_rope || (norm && !impl_->options.fuse_gemv_norm) ||
      !impl_->linears->Fuses(call, choice, norm, /*add=*/false, ctx))
    return Backend::LinearQkvRope(x, norm_weight, eps, normed, w, rope);  // the ops apart
  OpScope scope(*impl_, norm ? "RmsNormLinearQkvRope" : "LinearQkvRope",
                static_cast<double>(w.weight.bytes() + x.bytes() + w.bias.bytes() + rope.qkv.bytes()),
                2.0 * call.m * call.n * call.k, LinearTimingDetail(impl_->timing, call, choice));
  return impl_->linears->Run(call, choice, ctx);
}

bool CudaBackend::FusesFp8InputQkvRope(const LinearWeight& w, const QkvRopeArgs& rope, int64_t rows) const {
  const absl::StatusOr<cuda::QkvRopeParams> p = QkvRopeParamsOf(rope);
  if (!p.ok() || rows <= 0 || !TakesFp8Input(w, rows)) return false;
  LinearCall call = PlannedLinear(w, rows);
  const Fp8Input given;  // its presence: the input comes quantized (the end's rule reads no operand)
  call.quantized = &given;
  call.rope = &*p;
  return impl_->linears->FusesChosen(call, /*norm=*/false, /*add=*/false, linear_context());
}

absl::Status CudaBackend::LinearFp8InputQkvRope(Tensor x, Fp8Input quantized, const LinearWeight& w,
                                                const QkvRopeArgs& rope) {
  ASSIGN_OR_RETURN(const cuda::QkvRopeParams p, QkvRopeParamsOf(rope));
  const int64_t k = w.in_features(), m = k > 0 ? x.numel() / k : 0;
  RETURN_IF_ERROR(Expect(m * k == x.numel() && TakesFp8Input(w, m), "LinearFp8InputQkvRope",
                         "the weight does not take an FP8 input here"));
  RETURN_IF_ERROR(ValidateFp8Input("LinearFp8InputQkvRope", quantized, w, m, k));
  ASSIGN_OR_RETURN(LinearCall call, CheckLinear(x, w, rope.qkv, &quantized));
  const LinearContext ctx = linear_context();
  ASSIGN_OR_RETURN(const LinearKernelChoice choice, impl_->linears->Choose(call, ctx));
  call.rope = &p;
  if (!impl_->linears->Fuses(call, choice, /*norm=*/false, /*add=*/false, ctx))
    return Backend::LinearFp8InputQkvRope(x, quantized, w, rope);  // the ops apart
  OpScope scope(
      *impl_, "LinearQkvRope",
      static_cast<double>(w.weight.bytes() + quantized.values.bytes() + w.bias.bytes() + rope.qkv.bytes()),
      2.0 * call.m * call.n * call.k, LinearTimingDetail(impl_->timing, call, choice));
  return impl_->linears->Run(call, choice, ctx);
}

bool CudaBackend::FusesLinearAddRmsNorm(const LinearWeight& w, int64_t rows) const {
  if (rows <= 0 || w.format.element != DType::kF8E4M3) return false;
  const DType dt = activation_dtype();
  const int64_t n = w.out_features();
  LinearCall call = PlannedLinear(w, rows);
  const AddRmsNormEnd end{Tensor(nullptr, dt, {rows, n}, device()), Tensor(nullptr, dt, {n}, device()), 0.0f,
                          Tensor(nullptr, dt, {rows, n}, device()), nullptr};
  call.add_norm = &end;
  return impl_->linears->FusesChosen(call, /*norm=*/false, /*add=*/false, linear_context());
}

absl::Status CudaBackend::LinearAddRmsNorm(Tensor x, const LinearWeight& w, Tensor residual, Tensor delta,
                                           Tensor norm_weight, float eps, Tensor out,
                                           const LinearWeight& consumer, const Fp8Input* out_quantized) {
  const DType dt = activation_dtype();
  RETURN_IF_ERROR(ExpectOnDevice("LinearAddRmsNorm", device(), dt, {&residual, &norm_weight, &out}));
  ASSIGN_OR_RETURN(LinearCall call, CheckLinear(x, w, delta, nullptr));
  RETURN_IF_ERROR(Expect(
      residual.numel() == delta.numel() && out.numel() == delta.numel() && norm_weight.numel() == call.n,
      "LinearAddRmsNorm", "residual, output or norm weight mismatch"));
  std::optional<cuda::Fp8RowOutput> q;
  if (out_quantized != nullptr) {
    ASSIGN_OR_RETURN(q, Fp8RowOutputFor("LinearAddRmsNorm", out, consumer, *out_quantized));
  }
  const LinearContext ctx = linear_context();
  ASSIGN_OR_RETURN(const LinearKernelChoice choice, impl_->linears->Choose(call, ctx));
  const AddRmsNormEnd end{residual, norm_weight, eps, out, q ? &*q : nullptr};
  call.add_norm = &end;
  if (!impl_->linears->Fuses(call, choice, /*norm=*/false, /*add=*/false, ctx))  // the ops apart
    return Backend::LinearAddRmsNorm(x, w, residual, delta, norm_weight, eps, out, consumer, out_quantized);
  OpScope scope(*impl_, "LinearAddRmsNorm",
                static_cast<double>(w.weight.bytes() + x.bytes() + w.bias.bytes() + 3 * residual.bytes()),
                2.0 * call.m * call.n * call.k, LinearTimingDetail(impl_->timing, call, choice));
  return impl_->linears->Run(call, choice, ctx);
}

absl::Status CudaBackend::Attention(const AttentionArgs& a) {
  const DType dt = activation_dtype();
  RETURN_IF_ERROR(ExpectOnDevice("Attention", device(), dt, {&a.q, &a.out}));
  RETURN_IF_ERROR(ExpectCache("Attention", device(), dt, a.cache));
  RETURN_IF_ERROR(Expect(a.meta != nullptr, "Attention", "no step metadata"));
  const StepMetadata& m = *a.meta;
  RETURN_IF_ERROR(ExpectI32("Attention", device(), {&m.query_start, &m.context_lens, &m.block_tables}));
  RETURN_IF_ERROR(Expect(a.num_kv_heads > 0 && a.num_heads % a.num_kv_heads == 0 &&
                             a.q.numel() == int64_t{m.num_tokens} * a.num_heads * a.head_dim &&
                             a.out.numel() == a.q.numel() && a.cache.k.rank() == 4 &&
                             a.cache.k.dim(1) == a.num_kv_heads && a.cache.k.dim(3) == a.head_dim &&
                             m.block_tables.rank() == 2 && m.block_tables.dim(0) >= m.num_seqs &&
                             m.query_start.numel() >= m.num_seqs + 1 && m.context_lens.numel() >= m.num_seqs,
                         "Attention", "shape mismatch"));
  cuda::PagedAttentionParams p;
  p.q = a.q.data();
  p.out = a.out.data();
  p.k_cache = a.cache.k.data();
  p.v_cache = a.cache.v.data();
  p.query_start = m.query_start.data_as<const int32_t>();
  p.context_lens = m.context_lens.data_as<const int32_t>();
  p.block_tables = m.block_tables.data_as<const int32_t>();
  p.num_tokens = m.num_tokens;
  p.num_seqs = m.num_seqs;
  p.max_query_len = m.max_query_len;
  p.max_context_len = m.max_context_len;
  p.num_heads = a.num_heads;
  p.num_kv_heads = a.num_kv_heads;
  p.head_dim = a.head_dim;
  p.block_size = static_cast<int32_t>(a.cache.block_size());
  p.max_blocks_per_seq = static_cast<int32_t>(m.block_tables.dim(1));
  p.scale = a.scale;
  p.sliding_window = a.sliding_window;
  p.num_decode_seqs = m.num_decode_seqs;
  p.fp8_cache = a.cache.k.dtype() == DType::kF8E4M3;
  p.k_scale = a.cache.k_scale;
  p.v_scale = a.cache.v_scale;
  cuda::AttentionOptions opts;
  opts.num_sms = impl_->prop.multiProcessorCount;
  opts.force_splits = impl_->options.attention_splits;
  opts.decode_blocks_per_sm = impl_->options.attention_blocks_per_sm;
  opts.decode_fp8_transposed_o = impl_->options.attention_fp8_transposed_o;
  opts.force_simt = impl_->options.force_simt_attention;
  if (impl_->options.warp_decode_attention) opts.decode_kernel = cuda::DecodeKernel::kWarp;
  if (!impl_->options.serial_mixed_attention) {
    opts.side_stream = impl_->side_stream;
    opts.fork_event = impl_->fork_event;
    opts.join_event = impl_->join_event;
  }
  opts.pdl = impl_->options.programmatic_launch;
  const double es = static_cast<double>(DTypeSize(a.cache.k.dtype()));
  const double kv_bytes = 2.0 * m.num_seqs * static_cast<double>(m.max_context_len) * a.num_kv_heads * a.head_dim * es;
  const double keys_per_query =
      m.max_query_len > 1 ? 0.5 * m.max_context_len : static_cast<double>(m.max_context_len);
  OpScope scope(*impl_, "Attention", kv_bytes + 2.0 * a.q.bytes(),
                4.0 * m.num_tokens * a.num_heads * static_cast<double>(a.head_dim) * keys_per_query);
  return cuda::LaunchPagedAttention(dt, p, impl_->attention_workspace.ptr(),
                                    impl_->attention_workspace.bytes(), opts, impl_->stream);
}

absl::Status CudaBackend::SiluMul(Tensor gate_up, Tensor out) {
  const DType dt = activation_dtype();
  RETURN_IF_ERROR(ExpectOnDevice("SiluMul", device(), dt, {&gate_up, &out}));
  const int64_t rows = gate_up.rank() > 0 ? gate_up.dim(0) : 0;
  RETURN_IF_ERROR(Expect(gate_up.numel() == 2 * out.numel() && (rows == 0 || out.numel() % rows == 0), "SiluMul",
                         "shape mismatch"));
  OpScope scope(*impl_, "SiluMul", 1.5 * gate_up.bytes(), 0);
  return cuda::LaunchSiluMul(dt, gate_up.data(), out.data(), rows, rows ? out.numel() / rows : 0, impl_->stream,
                             impl_->options.programmatic_launch);
}

bool CudaBackend::TakesFp8Input(const LinearWeight& w, int64_t rows) const {
  if (!impl_->options.fuse_fp8_input_quant || rows <= 0) return false;
  return impl_->linears->TakesFp8Input(LinearCall{Tensor(), &w, Tensor(nullptr, activation_dtype(), {rows, w.out_features()}, device()),
                                                  rows, w.out_features(), w.in_features(), activation_dtype()},
                                       linear_context());
}

absl::StatusOr<cuda::Fp8RowOutput> CudaBackend::Fp8RowOutputFor(const char* op, Tensor out,
                                                                const LinearWeight& consumer,
                                                                const Fp8Input& quantized) const {
  const int64_t cols = consumer.in_features(), rows = cols > 0 ? out.numel() / cols : 0;
  RETURN_IF_ERROR(Expect(rows * cols == out.numel(), op, "the output does not match the consumer's input"));
  RETURN_IF_ERROR(ValidateFp8Input(op, quantized, consumer, rows, cols));
  cuda::Fp8RowOutput q;
  q.codes = quantized.values.data_as<uint8_t>();
  if (consumer.input_quant == ActivationQuant::kStaticPerTensor)
    q.static_scale = consumer.input_scale.data_as<const float>();
  else
    q.scales = quantized.scales.data_as<float>();
  // Where the consumer takes the quantized input, its GEMM reads nothing else (TakesFp8Input has
  // planned it): the 16-bit output need not be written.
  q.values_unused = TakesFp8Input(consumer, rows);
  return q;
}

absl::Status CudaBackend::SiluMulFp8(Tensor gate_up, Tensor out, const LinearWeight& consumer, Fp8Input quantized) {
  const DType dt = activation_dtype();
  RETURN_IF_ERROR(ExpectOnDevice("SiluMulFp8", device(), dt, {&gate_up, &out}));
  const int64_t rows = gate_up.rank() > 0 ? gate_up.dim(0) : 0;
  RETURN_IF_ERROR(Expect(gate_up.numel() == 2 * out.numel() && (rows == 0 || out.numel() % rows == 0),
                         "SiluMulFp8", "shape mismatch"));
  ASSIGN_OR_RETURN(const cuda::Fp8RowOutput q, Fp8RowOutputFor("SiluMulFp8", out, consumer, quantized));
  OpScope scope(*impl_, "SiluMulFp8", 1.5 * gate_up.bytes() + quantized.values.bytes(), 0);
  return cuda::LaunchSiluMulFp8(dt, gate_up.data(), out.data(), rows, rows ? out.numel() / rows : 0, q,
                                impl_->stream, impl_->options.programmatic_launch);
}

absl::Status CudaBackend::GatherRows(Tensor x, Tensor rows, Tensor out) {
  // Activation rows, or float32 ones (TP puts all-gathered logits shards in order with it).
  const DType dt = x.dtype() == DType::kF32 ? DType::kF32 : activation_dtype();
  RETURN_IF_ERROR(ExpectOnDevice("GatherRows", device(), dt, {&x, &out}));
  RETURN_IF_ERROR(ExpectI32("GatherRows", device(), {&rows}));
  const int64_t n = rows.numel();
  const int64_t width = x.rank() > 0 && x.dim(0) ? x.numel() / x.dim(0) : 0;
  RETURN_IF_ERROR(Expect(out.numel() == n * width, "GatherRows", "shape mismatch"));
  OpScope scope(*impl_, "GatherRows", 2.0 * out.bytes(), 0);
  return cuda::LaunchGatherRows(dt, x.data(), x.dim(0), width, rows.data_as<const int32_t>(), n, out.data(),
                                impl_->stream);
}

absl::Status CudaBackend::PrepareSampler(int32_t max_rows, int64_t vocab) {
  if (max_rows <= 0 || vocab <= 0) return absl::OkStatus();
  Impl& s = *impl_;
  DeviceArena& arena = *s.arena;
  RETURN_IF_ERROR(s.sample_work.Ensure(arena, static_cast<size_t>(max_rows) * vocab * sizeof(float),
                                       "the sampler's working memory"));
  RETURN_IF_ERROR(
      s.sample_params.Ensure(arena, max_rows * sizeof(cuda::SamplerRowParams), "the sampler's parameters"));
  RETURN_IF_ERROR(
      s.sample_results.Ensure(arena, max_rows * sizeof(cuda::SamplerRowResult), "the sampler's results"));
  const size_t entries = static_cast<size_t>(max_rows) * 1024 * sizeof(cuda::SamplerTokenEntry);
  RETURN_IF_ERROR(s.sample_entries.Ensure(arena, entries, "the sampler's token entries"));
  for (int slot = 0; slot < kSampleSlots; ++slot) {
    RETURN_IF_ERROR(s.host_params[slot].Ensure(max_rows * sizeof(cuda::SamplerRowParams)));
    RETURN_IF_ERROR(s.host_results[slot].Ensure(max_rows * sizeof(cuda::SamplerRowResult)));
    RETURN_IF_ERROR(s.host_entries[slot].Ensure(entries));
  }
  if (static_cast<int64_t>(s.marks.size()) < vocab) s.marks.assign(vocab, 0);
  if (s.entries.capacity() < static_cast<size_t>(max_rows) * 1024) s.entries.reserve(static_cast<size_t>(max_rows) * 1024);
  return absl::OkStatus();
}

absl::Status CudaBackend::EnqueueSample(const SampleArgs& a) {
  RETURN_IF_ERROR(ExpectOnDevice("Sample", device(), DType::kF32, {&a.logits}));
  RETURN_IF_ERROR(ValidateSampleRows(a.logits, a.rows));
  RETURN_IF_ERROR(Expect(a.slot >= 0 && a.slot < kSampleSlots, "Sample", "slot out of range"));
  const absl::Span<const SampleRow> rows = a.rows;
  const int32_t n = static_cast<int32_t>(rows.size());
  Impl& s = *impl_;
  s.slot_rows[a.slot] = n;
  if (n == 0) return absl::OkStatus();
  const int64_t vocab = a.logits.dim(1);
  const bool pending = std::any_of(rows.begin(), rows.end(), [](const SampleRow& r) { return r.pending_input_index >= 0; });
  if (pending) RETURN_IF_ERROR(ExpectI32("Sample", device(), {&a.input_tokens}));
  if (!a.sampled_tokens.empty()) {
    RETURN_IF_ERROR(ExpectI32("Sample", device(), {&a.sampled_tokens}));
    RETURN_IF_ERROR(Expect(a.sampled_tokens.numel() >= n, "Sample", "sampled token buffer too small"));
  }
  // Grows only past what PrepareSampler reserved. The slot's pinned buffers are free: the caller
  // read (or dropped) the slot's previous results, so the stream has passed their copies.
  RETURN_IF_ERROR(PrepareSampler(n, vocab));
  // Host side: per-row parameters and the distinct biased or penalized tokens of each row.
  auto* hp = static_cast<cuda::SamplerRowParams*>(s.host_params[a.slot].ptr);
  std::vector<cuda::SamplerTokenEntry>& entries = s.entries;
  entries.clear();
  // Rows that only take their argmax need no more than one block each: the sampler's clusters
  // (several blocks a row) serve the passes of sampling, penalties and log-probabilities.
  bool argmax_only = true;
  for (int32_t r = 0; r < n; ++r) {
    const SampleRow& row = rows[r];
    const SamplingParams& p = *row.params;
    argmax_only = argmax_only && p.temperature <= 0.0f && p.num_top_logprobs == 0 && row.logit_bias.empty() &&
                  p.repetition_penalty == 1.0f && p.presence_penalty == 0.0f && p.frequency_penalty == 0.0f;
    cuda::SamplerRowParams& q = hp[r];
    q = cuda::SamplerRowParams{};
    q.temperature = p.temperature;
    q.top_k = p.top_k;
    q.top_p = p.top_p;
    q.min_p = p.min_p;
    q.repetition_penalty = p.repetition_penalty;
    q.presence_penalty = p.presence_penalty;
    q.frequency_penalty = p.frequency_penalty;
    q.num_top_logprobs = p.num_top_logprobs;
    q.seed = p.seed;
    q.step = row.step;
    q.pending_input_index = row.pending_input_index;
    if (row.pending_input_index >= a.input_tokens.numel())
      return absl::InvalidArgumentError("Sample: pending input index out of range");
    q.entry_begin = q.entry_end = static_cast<int32_t>(entries.size());
    const bool rep = p.repetition_penalty != 1.0f, pf = p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f;
    if (!rep && !pf && row.logit_bias.empty()) continue;
    // marks[t]: 0 unseen, else 1 + index of t's entry.
    auto entry = [&](int32_t t) -> cuda::SamplerTokenEntry& {
      if (s.marks[t] == 0) {
        s.marks[t] = static_cast<int32_t>(entries.size()) + 1;
        entries.push_back({t, 0, 0.0f, 0});
      }
      return entries[s.marks[t] - 1];
    };
    for (const LogitBias& b : row.logit_bias) entry(b.token).bias += b.bias;  // in range: ValidateSampleRows
    if (rep)
      for (int32_t t : row.prompt_tokens)
        if (t >= 0 && t < vocab) entry(t).seen = 1;
    if (rep || pf)
      for (int32_t t : row.output_tokens) {
        if (t < 0 || t >= vocab) continue;
        cuda::SamplerTokenEntry& e = entry(t);
        e.seen = 1;
        if (pf) ++e.output_count;  // with the repetition penalty alone, counts subtract nothing
      }
    for (size_t e = q.entry_begin; e < entries.size(); ++e) s.marks[entries[e].token] = 0;
    q.entry_end = static_cast<int32_t>(entries.size());
  }
  const size_t entry_bytes = entries.size() * sizeof(cuda::SamplerTokenEntry);
  RETURN_IF_ERROR(
      s.sample_entries.Ensure(*s.arena, std::max<size_t>(entry_bytes, 1), "the sampler's token entries"));
  RETURN_IF_ERROR(s.host_entries[a.slot].Ensure(std::max<size_t>(entry_bytes, 1)));
  if (entry_bytes) std::memcpy(s.host_entries[a.slot].ptr, entries.data(), entry_bytes);
  CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(s.sample_params.ptr(), s.host_params[a.slot].ptr,
                                       n * sizeof(cuda::SamplerRowParams), cudaMemcpyHostToDevice, s.stream));
  if (entry_bytes)
    CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(s.sample_entries.ptr(), s.host_entries[a.slot].ptr, entry_bytes,
                                         cudaMemcpyHostToDevice, s.stream));
  {
    OpScope scope(*impl_, "Sample", static_cast<double>(n) * vocab * 4.0, 0);
    RETURN_IF_ERROR(cuda::LaunchSampler(
        a.logits.data_as<const float>(), n, vocab, static_cast<const cuda::SamplerRowParams*>(s.sample_params.ptr()),
        static_cast<const cuda::SamplerTokenEntry*>(s.sample_entries.ptr()),
        pending ? a.input_tokens.data_as<const int32_t>() : nullptr, static_cast<float*>(s.sample_work.ptr()),
        static_cast<cuda::SamplerRowResult*>(s.sample_results.ptr()),
        a.sampled_tokens.empty() ? nullptr : a.sampled_tokens.data_as<int32_t>(), s.stream,
        /*max_blocks_per_row=*/argmax_only ? 1 : 8));
  }
  CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(s.host_results[a.slot].ptr, s.sample_results.ptr(),
                                       n * sizeof(cuda::SamplerRowResult), cudaMemcpyDeviceToHost, s.stream));
  return absl::OkStatus();
}

absl::Status CudaBackend::ReadSampleResults(int slot, absl::Span<SampleResult> results) {
  RETURN_IF_ERROR(Expect(slot >= 0 && slot < kSampleSlots, "ReadSampleResults", "slot out of range"));
  const Impl& s = *impl_;
  RETURN_IF_ERROR(Expect(static_cast<int32_t>(results.size()) == s.slot_rows[slot], "ReadSampleResults",
                         "row count does not match the sampling"));
  const auto* hr = static_cast<const cuda::SamplerRowResult*>(s.host_results[slot].ptr);
  for (size_t r = 0; r < results.size(); ++r) {
    SampleResult& out = results[r];
    out.token = hr[r].token;
    out.logprob = hr[r].logprob;
    out.num_top = hr[r].num_top;
    for (int i = 0; i < out.num_top; ++i) out.top[i] = {hr[r].top_token[i], hr[r].top_logprob[i]};
  }
  return absl::OkStatus();
}

absl::Status CudaBackend::ResolvePendingTokens(Tensor ids, Tensor sampled) {
  RETURN_IF_ERROR(ExpectI32("ResolvePendingTokens", device(), {&ids, &sampled}));
  return cuda::LaunchResolvePendingTokens(ids.data_as<int32_t>(), ids.numel(), sampled.data_as<const int32_t>(),
                                          sampled.numel(), impl_->stream);
}

absl::StatusOr<std::unique_ptr<StepFence>> CudaBackend::CreateFence() {
  cudaEvent_t event = nullptr;
  CUDA_RETURN_IF_ERROR(cudaEventCreate(&event));
  return std::unique_ptr<StepFence>(new CudaStepFence(event, impl_->stream));
}

absl::StatusOr<Buffer> CudaBackend::AllocateStaging(size_t bytes) {
  void* p = nullptr;
  CUDA_RETURN_IF_ERROR(cudaMallocHost(&p, std::max<size_t>(bytes, 1)));
  return Buffer(p, bytes, Device{}, [](void* q) { cudaFreeHost(q); });
}

absl::Status CudaBackend::FillUniform(Tensor dst, uint64_t seed, float low, float high) {
  RETURN_IF_ERROR(Expect(dst.device() == device(), "FillUniform", "tensor is not on this GPU"));
  return cuda::LaunchFillUniform(dst.dtype(), dst.data(), dst.numel(), seed, low, high, impl_->stream);
}

absl::Status CudaBackend::FillPattern(Tensor dst, uint32_t pattern) {
  RETURN_IF_ERROR(Expect(dst.device() == device(), "FillPattern", "tensor is not on this GPU"));
  const size_t bytes = dst.bytes();
  if (bytes % 4 == 0) return cuda::LaunchFillPattern(dst.data(), static_cast<int64_t>(bytes), pattern, impl_->stream);
  CUDA_RETURN_IF_ERROR(cudaMemsetAsync(dst.data(), static_cast<int>(pattern & 0xff), bytes, impl_->stream));
  return absl::OkStatus();
}

absl::Status CudaBackend::BeginCapture() {
  if (impl_->capturing) return absl::FailedPreconditionError("BeginCapture: already capturing");
  CUDA_RETURN_IF_ERROR(cudaStreamBeginCapture(impl_->stream, cudaStreamCaptureModeThreadLocal));
  impl_->capturing = true;
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<StepGraph>> CudaBackend::EndCapture() {
  if (!impl_->capturing) return absl::FailedPreconditionError("EndCapture: not capturing");
  impl_->capturing = false;
  cudaGraph_t graph = nullptr;
  CUDA_RETURN_IF_ERROR(cudaStreamEndCapture(impl_->stream, &graph));
  cudaGraphExec_t exec = nullptr;
  const cudaError_t err = cudaGraphInstantiate(&exec, graph, 0);
  if (err != cudaSuccess) {
    cudaGraphDestroy(graph);
    CUDA_RETURN_IF_ERROR(err);
  }
  return std::unique_ptr<StepGraph>(new CudaStepGraph(graph, exec, impl_->stream));
}

void CudaBackend::StartOpTiming() {
  Impl& s = *impl_;
  if (s.events.empty()) {
    s.events.resize(2 * kMaxTimedOps);
    for (cudaEvent_t& e : s.events) cudaEventCreate(&e);
  }
  s.timed.clear();
  s.timing = true;
}

absl::StatusOr<std::vector<OpTiming>> CudaBackend::CollectOpTimings() {
  Impl& s = *impl_;
  s.timing = false;
  RETURN_IF_ERROR(Synchronize());
  for (size_t i = 0; i < s.timed.size(); ++i)
    CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&s.timed[i].ms, s.events[2 * i], s.events[2 * i + 1]));
  return std::move(s.timed);
}

}  // namespace llm
