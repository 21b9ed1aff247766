// NvlinkCommunicator: the one-shot all-reduce over CUDA IPC peer memory, in front of NCCL
// (llm_parallel_nccl in builds with CUDA and NCCL).
#include "parallel/nvlink_communicator.h"

#include <cuda_runtime.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/core/status.h"
#include "kernels/cuda/comm/one_shot_all_reduce.h"
#include "kernels/cuda/comm/push_all_reduce.h"
#include "parallel/internal/cuda_check.h"

namespace llm {
namespace {

// This rank's region and the peers' regions mapped into this process. Unmaps and frees on
// destruction unless Leak() was called.
class IpcRegions {
 public:
  IpcRegions(int device, int world_size) : device_(device), mapped_(world_size, nullptr) {}
  ~IpcRegions() {
    if (cudaSetDevice(device_) != cudaSuccess) return;
    for (void* p : mapped_) {
      if (p != nullptr) cudaIpcCloseMemHandle(p);
    }
    if (own_ != nullptr) cudaFree(own_);
  }
  IpcRegions(const IpcRegions&) = delete;
  IpcRegions& operator=(const IpcRegions&) = delete;

  // Allocates `bytes` of zeroed device memory and its IPC handle. The zeroing is complete on
  // return: peers may write flags into the region as soon as they have mapped it.
  absl::Status Allocate(size_t bytes, cudaIpcMemHandle_t* handle) {
    LLM_CUDA_CHECK(cudaSetDevice(device_));
    LLM_CUDA_CHECK(cudaMalloc(&own_, bytes));
    LLM_CUDA_CHECK(cudaMemset(own_, 0, bytes));
    LLM_CUDA_CHECK(cudaDeviceSynchronize());
    LLM_CUDA_CHECK(cudaIpcGetMemHandle(handle, own_));
    return absl::OkStatus();
  }

  absl::Status Map(int rank, const cudaIpcMemHandle_t& handle) {
    LLM_CUDA_CHECK(cudaSetDevice(device_));
    // Lazy peer access: the driver enables access to the peer's device for this mapping.
    LLM_CUDA_CHECK(cudaIpcOpenMemHandle(&mapped_[rank], handle, cudaIpcMemLazyEnablePeerAccess));
    return absl::OkStatus();
  }

  // Forgets every pointer without unmapping or freeing (a peer may still use them).
  void Leak() {
    own_ = nullptr;
    for (void*& p : mapped_) p = nullptr;
  }

  void* own() const { return own_; }
  void* mapped(int rank) const { return mapped_[rank]; }

 private:
  int device_;
  void* own_ = nullptr;
  std::vector<void*> mapped_;  // by rank; null for this rank
};

class NvlinkCommunicator final : public DeviceCommunicator {
 public:
  NvlinkCommunicator(MpiCommunicator& group, std::unique_ptr<DeviceCommunicator> nccl,
                     std::unique_ptr<IpcRegions> regions, const cuda::OneShotPeers& peers,
                     std::optional<cuda::PushPeers> push, bool fuse, bool push_fused, size_t fuse_from_rows)
      : group_(group),
        nccl_(std::move(nccl)),
        regions_(std::move(regions)),
        peers_(peers),
        push_(push),
        fuse_(fuse),
        push_fused_(push_fused),
        fuse_from_rows_(fuse_from_rows) {}
  ~NvlinkCommunicator() override;

  int rank() const override { return nccl_->rank(); }
  int size() const override { return nccl_->size(); }
  absl::Status AllReduceSum(void* data, size_t count, DType dtype) override {
    return AllReduceSumInto(data, data, count, dtype);
  }
  absl::Status AllGather(const void* send, void* recv, size_t count, DType dtype) override {
    return nccl_->AllGather(send, recv, count, dtype);
  }
  absl::Status Broadcast(void* data, size_t count, DType dtype, int root) override {
    return nccl_->Broadcast(data, count, dtype, root);
  }
  absl::Status Send(const void* data, size_t count, DType dtype, int peer) override {
    return nccl_->Send(data, count, dtype, peer);
  }
  absl::Status Recv(void* data, size_t count, DType dtype, int peer) override {
    return nccl_->Recv(data, count, dtype, peer);
  }
  absl::Status Synchronize() override {
    absl::Status s = nccl_->Synchronize();
    // The one-shot kernel shares the stream: a trapped kernel shows up here too, and after a
    // failed Synchronize (NCCL aborted, a peer gone) no new one-shot call may be enqueued.
    if (!s.ok()) broken_ = true;
    return s;
  }
  void* stream() const override { return nccl_->stream(); }
  int device() const override { return nccl_->device(); }
  // The one-shot kernel has no host-side state per call (epochs live in device memory).
  bool CapturableInGraph() const override { return nccl_->CapturableInGraph(); }

  bool CanAllReduceAddRmsNorm(size_t rows, size_t dim, DType dtype) const override {
    if (!fuse_ || rows == 0 || dim == 0) return false;
    // Sizes the push kernel takes: its fused form or nothing (the plain push all-reduce then the
    // caller's norm kernel); larger ones: the one-shot kernel's fused form from fuse_from_rows_.
    if (PushFitsRows(rows, dim, dtype)) return push_fused_;
    return rows >= fuse_from_rows_ && cuda::OneShotFitsRows(peers_.layout, dtype, rows, dim);
  }
  absl::Status AllReduceAddRmsNorm(const void* delta, void* residual, const void* weight, float eps,
                                   void* out, size_t rows, size_t dim, DType dtype) override;

  absl::Status AllReduceSumInto(const void* in, void* out, size_t count, DType dtype);

 private:
  absl::Status CheckNotBroken() const;
  bool PushFitsRows(size_t rows, size_t dim, DType dtype) const {
    return push_.has_value() && rows <= SIZE_MAX / dim && cuda::PushFits(push_->layout, dtype, rows * dim);
  }

  MpiCommunicator& group_;
  std::unique_ptr<DeviceCommunicator> nccl_;
  std::unique_ptr<IpcRegions> regions_;
  cuda::OneShotPeers peers_;
  const std::optional<cuda::PushPeers> push_;  // the push kernel's view of the same regions
  // Whether AllReduceAddRmsNorm is offered at all, and from how many rows with the one-shot
  // kernel (the push kernel's fused form: for every size it takes). The same on every rank.
  const bool fuse_;
  const bool push_fused_;
  const size_t fuse_from_rows_;
  bool broken_ = false;
};

NvlinkCommunicator::~NvlinkCommunicator() {
  // Our kernels must be done before the barrier, and every peer's kernels (which read our staging
  // buffer) before we free it: both hold after the barrier. The barrier runs even when draining
  // failed, so that the peers are not left waiting for it. Errors only decide between freeing and
  // leaking; there is no one to report them to.
  const bool drained = cudaSetDevice(device()) == cudaSuccess &&
                       cudaStreamSynchronize(static_cast<cudaStream_t>(stream())) == cudaSuccess;
  const bool peers_done = group_.Barrier().ok();
  if (!drained || !peers_done) regions_->Leak();
  regions_.reset();
}

absl::Status NvlinkCommunicator::CheckNotBroken() const {
  if (!broken_) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat("NVLink all-reduce on ", group_.name(), " group (rank ",
                                                    rank(), "): an earlier Synchronize failed"));
}

absl::Status NvlinkCommunicator::AllReduceAddRmsNorm(const void* delta, void* residual, const void* weight,
                                                     float eps, void* out, size_t rows, size_t dim,
                                                     DType dtype) {
  RETURN_IF_ERROR(CheckNotBroken());
  if (!CanAllReduceAddRmsNorm(rows, dim, dtype)) {
    return absl::InvalidArgumentError(absl::StrCat("AllReduceAddRmsNorm: ", rows, " rows of ", dim, " ",
                                                   std::string(DTypeName(dtype)), " not offered (",
                                                   fuse_ ? "too large" : "fusion off", ")"));
  }
  const auto s = static_cast<cuda::Stream>(stream());
  if (PushFitsRows(rows, dim, dtype))
    return cuda::LaunchPushAllReduceAddRmsNorm(*push_, dtype, delta, residual, weight, eps, out, rows, dim,
                                               s);
  return cuda::LaunchOneShotAllReduceAddRmsNorm(peers_, dtype, delta, residual, weight, eps, out, rows, dim,
                                                s);
}

absl::Status NvlinkCommunicator::AllReduceSumInto(const void* in, void* out, size_t count, DType dtype) {
  RETURN_IF_ERROR(CheckNotBroken());
  if (push_.has_value() && cuda::PushFits(push_->layout, dtype, count))
    return cuda::LaunchPushAllReduce(*push_, dtype, in, out, count, static_cast<cuda::Stream>(stream()));
  if (!cuda::OneShotFits(peers_.layout, dtype, count)) {
    if (in != out && count > 0) {
      LLM_CUDA_CHECK(cudaMemcpyAsync(out, in, count * DTypeSize(dtype), cudaMemcpyDeviceToDevice,
                                     static_cast<cudaStream_t>(stream())));
    }
    return nccl_->AllReduceSum(out, count, dtype);
  }
  return cuda::LaunchOneShotAllReduce(peers_, dtype, in, out, count, static_cast<cuda::Stream>(stream()));
}

// --- creation ---

constexpr size_t kReasonBytes = 160;

// What each rank contributes to the first all-gather. Plain bytes: the same layout on every rank
// (one binary).
struct RankRecord {
  enum State : int32_t { kReady = 0, kFallback = 1, kInvalid = 2 };
  int32_t state = kReady;
  int32_t blocks = 0;
  uint64_t capacity_bytes = 0;
  int64_t timeout_ns = 0;
  int32_t fuse_add_rms_norm = 0;
  int32_t fuse_min_rows = 0;
  uint64_t push_capacity_bytes = 0;
  int32_t push_enabled = 0;  // not switched off by LLM_PUSH_ALLREDUCE=0
  int32_t push_fuse_add_rms_norm = 0;
  char host[64] = {};
  char bus_id[32] = {};
  cudaIpcMemHandle_t handle = {};
  char reason[kReasonBytes] = {};  // for kFallback and kInvalid
};

// The second all-gather: whether the rank mapped every peer.
struct MapRecord {
  int32_t ok = 0;
  char reason[kReasonBytes] = {};
};

template <size_t N>
void CopyString(char (&dst)[N], const std::string& src) {
  std::memset(dst, 0, N);
  std::memcpy(dst, src.data(), std::min(src.size(), N - 1));
}

template <typename Record>
absl::StatusOr<std::vector<Record>> AllGatherRecords(MpiCommunicator& group, const Record& mine) {
  std::vector<Record> all(group.size());
  RETURN_IF_ERROR(group.AllGather(&mine, all.data(), sizeof(Record), DType::kU8));
  return all;
}

// Where the push kernel's part starts in a region: after the one-shot part, 256-byte aligned.
size_t PushRegionOffset(const cuda::OneShotLayout& layout) {
  return (layout.region_bytes() + 255) / 256 * 256;
}

// This rank's record: options checked, the region allocated and exported when everything local
// allows it. Failures of CUDA calls make a fallback, not an error: NCCL still works. `push`
// receives the push kernel's layout when options.push_capacity_bytes > 0 (its part of the region
// is allocated and initialized whether or not every rank ends up using it).
RankRecord MakeRankRecord(const MpiCommunicator& group, const DeviceCommunicator& nccl,
                          const NvlinkOptions& options, IpcRegions& regions, cuda::OneShotLayout* layout,
                          std::optional<cuda::PushLayout>* push) {
  RankRecord rec;
  rec.blocks = options.blocks;
  rec.capacity_bytes = options.capacity_bytes;
  rec.timeout_ns = absl::ToInt64Nanoseconds(options.spin_timeout);
  const char* fuse_env = std::getenv("LLM_FUSED_ALLREDUCE_NORM");
  rec.fuse_add_rms_norm = options.fuse_add_rms_norm && !(fuse_env != nullptr && std::string(fuse_env) == "0");
  rec.fuse_min_rows = options.fuse_min_rows;
  rec.push_capacity_bytes = options.push_capacity_bytes;
  const char* push_env = std::getenv("LLM_PUSH_ALLREDUCE");
  rec.push_enabled = !(push_env != nullptr && std::string(push_env) == "0");
  rec.push_fuse_add_rms_norm = options.push_fuse_add_rms_norm;
  auto fail = [&rec](RankRecord::State state, const std::string& why) {
    rec.state = state;
    CopyString(rec.reason, why);
    return rec;
  };
  if (nccl.rank() != group.rank() || nccl.size() != group.size()) {
    return fail(RankRecord::kInvalid,
                absl::StrCat("NCCL communicator rank ", nccl.rank(), "/", nccl.size(), " is not ",
                             group.name(), " group rank ", group.rank(), "/", group.size()));
  }
  absl::StatusOr<cuda::OneShotLayout> made = cuda::MakeOneShotLayout(options.capacity_bytes, options.blocks);
  if (!made.ok()) return fail(RankRecord::kInvalid, std::string(made.status().message()));
  *layout = *made;
  if (options.push_capacity_bytes > 0) {
    absl::StatusOr<cuda::PushLayout> push_made =
        cuda::MakePushLayout(options.push_capacity_bytes, options.blocks, group.size());
    if (!push_made.ok()) return fail(RankRecord::kInvalid, std::string(push_made.status().message()));
    *push = *push_made;
  }
  if (rec.timeout_ns <= 0) return fail(RankRecord::kInvalid, "spin_timeout must be positive");
  if (!options.enable) return fail(RankRecord::kFallback, "disabled by NvlinkOptions::enable");
  const char* env = std::getenv("LLM_CUSTOM_ALLREDUCE");
  if (env != nullptr && std::string(env) == "0") {
    return fail(RankRecord::kFallback, "disabled by LLM_CUSTOM_ALLREDUCE=0");
  }
  if (gethostname(rec.host, sizeof(rec.host) - 1) != 0)
    return fail(RankRecord::kFallback, "gethostname failed");
  if (absl::Status s =
          internal::CudaStatus(cudaDeviceGetPCIBusId(rec.bus_id, sizeof(rec.bus_id), nccl.device()),
                               "cudaDeviceGetPCIBusId", __FILE__, __LINE__);
      !s.ok()) {
    return fail(RankRecord::kFallback, std::string(s.message()));
  }
  const size_t bytes =
      push->has_value() ? PushRegionOffset(*layout) + (*push)->region_bytes() : layout->region_bytes();
  if (absl::Status s = regions.Allocate(bytes, &rec.handle); !s.ok()) {
    return fail(RankRecord::kFallback, std::string(s.message()));
  }
  if (push->has_value()) {
    if (absl::Status s =
            cuda::InitPushRegion(static_cast<char*>(regions.own()) + PushRegionOffset(*layout), **push);
        !s.ok()) {
      return fail(RankRecord::kFallback, std::string(s.message()));
    }
  }
  return rec;
}

// Maps every peer's region after checking that this rank's GPU can reach the peer's GPU.
absl::Status MapPeers(const std::vector<RankRecord>& all, int rank, int device, IpcRegions& regions) {
  for (int q = 0; q < static_cast<int>(all.size()); ++q) {
    if (q == rank) continue;
    int peer_device = -1;
    if (cudaDeviceGetByPCIBusId(&peer_device, all[q].bus_id) != cudaSuccess) {
      return absl::UnavailableError(
          absl::StrCat("GPU ", all[q].bus_id, " of rank ", q, " is not visible to rank ", rank));
    }
    if (peer_device == device) {
      return absl::UnavailableError(absl::StrCat("ranks ", rank, " and ", q, " share GPU ", all[q].bus_id));
    }
    int can_access = 0;
    LLM_CUDA_CHECK(cudaDeviceCanAccessPeer(&can_access, device, peer_device));
    if (!can_access) {
      return absl::UnavailableError(absl::StrCat("no peer access from GPU ", all[rank].bus_id, " (rank ",
                                                 rank, ") to GPU ", all[q].bus_id, " (rank ", q, ")"));
    }
    RETURN_IF_ERROR(regions.Map(q, all[q].handle));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<DeviceCommunicator>> KeepNccl(std::unique_ptr<DeviceCommunicator> nccl,
                                                             NvlinkSetup* setup, std::string why) {
  if (setup != nullptr)
    *setup = NvlinkSetup{.one_shot = false, .capacity_bytes = 0, .reason = std::move(why)};
  return nccl;
}

}  // namespace

absl::StatusOr<std::unique_ptr<DeviceCommunicator>> CreateNvlinkCommunicator(
    MpiCommunicator& group, std::unique_ptr<DeviceCommunicator> nccl, const NvlinkOptions& options,
    NvlinkSetup* setup) {
  const int rank = group.rank(), world = group.size();
  if (nccl == nullptr) return absl::InvalidArgumentError("CreateNvlinkCommunicator: null NCCL communicator");
  // The same on every rank: no agreement needed.
  if (world < 2 || world > cuda::kOneShotMaxRanks) {
    return KeepNccl(std::move(nccl), setup,
                    absl::StrCat("world size ", world, " outside [2, ", cuda::kOneShotMaxRanks, "]"));
  }

  auto regions = std::make_unique<IpcRegions>(nccl->device(), world);
  cuda::OneShotLayout layout;
  std::optional<cuda::PushLayout> push_layout;
  const RankRecord mine = MakeRankRecord(group, *nccl, options, *regions, &layout, &push_layout);
  // A failed runtime call stays CUDA's "last error", which the next kernel launch check would
  // report as its own: clear it, the failure is in the record.
  if (mine.state != RankRecord::kReady) cudaGetLastError();
  ASSIGN_OR_RETURN(const std::vector<RankRecord> all, AllGatherRecords(group, mine));
  // Every rank sees the same records, so every branch below is taken by all ranks alike.
  for (int q = 0; q < world; ++q) {
    if (all[q].state == RankRecord::kInvalid) {
      return absl::InvalidArgumentError(
          absl::StrCat("CreateNvlinkCommunicator: rank ", q, ": ", all[q].reason));
    }
    if (all[q].blocks != all[0].blocks || all[q].capacity_bytes != all[0].capacity_bytes ||
        all[q].timeout_ns != all[0].timeout_ns || all[q].fuse_min_rows != all[0].fuse_min_rows ||
        all[q].push_capacity_bytes != all[0].push_capacity_bytes ||
        all[q].push_fuse_add_rms_norm != all[0].push_fuse_add_rms_norm) {
      return absl::InvalidArgumentError(
          absl::StrCat("CreateNvlinkCommunicator: NvlinkOptions differ between ranks 0 and ", q));
    }
  }
  for (int q = 0; q < world; ++q) {
    if (all[q].state == RankRecord::kFallback) {
      return KeepNccl(std::move(nccl), setup, absl::StrCat("rank ", q, ": ", all[q].reason));
    }
    if (std::strncmp(all[q].host, all[0].host, sizeof(all[q].host)) != 0) {
      return KeepNccl(
          std::move(nccl), setup,
          absl::StrCat("ranks 0 and ", q, " are on different hosts (", all[0].host, ", ", all[q].host, ")"));
    }
  }

  MapRecord mapped;
  const absl::Status map_status = MapPeers(all, rank, nccl->device(), *regions);
  mapped.ok = map_status.ok() ? 1 : 0;
  if (!map_status.ok()) cudaGetLastError();  // as above
  CopyString(mapped.reason, std::string(map_status.message()));
  ASSIGN_OR_RETURN(const std::vector<MapRecord> all_mapped, AllGatherRecords(group, mapped));
  for (int q = 0; q < world; ++q) {
    if (!all_mapped[q].ok)
      return KeepNccl(std::move(nccl), setup, absl::StrCat("rank ", q, ": ", all_mapped[q].reason));
  }

  cuda::OneShotPeers peers;
  for (int q = 0; q < world; ++q) peers.regions[q] = q == rank ? regions->own() : regions->mapped(q);
  peers.rank = rank;
  peers.world_size = world;
  peers.layout = layout;
  peers.timeout_ns = static_cast<uint64_t>(mine.timeout_ns);
  bool fuse = true;  // offered only where every rank agrees, so all ranks take the same path
  bool use_push = push_layout.has_value();  // likewise
  for (int q = 0; q < world; ++q) {
    fuse = fuse && all[q].fuse_add_rms_norm != 0;
    use_push = use_push && all[q].push_enabled != 0;
  }
  std::optional<cuda::PushPeers> push;
  if (use_push) {
    push.emplace();
    const size_t offset = PushRegionOffset(layout);
    for (int q = 0; q < world; ++q) push->regions[q] = static_cast<char*>(peers.regions[q]) + offset;
    push->rank = rank;
    push->layout = *push_layout;
    push->timeout_ns = peers.timeout_ns;
  }
  if (setup != nullptr) {
    *setup = NvlinkSetup{.one_shot = true,
                         .capacity_bytes = layout.capacity_bytes(),
                         .fused_add_rms_norm = fuse,
                         .push_capacity_bytes = use_push ? push_layout->capacity_bytes : 0,
                         .reason = ""};
  }
  return std::unique_ptr<DeviceCommunicator>(new NvlinkCommunicator(
      group, std::move(nccl), std::move(regions), peers, push, fuse, options.push_fuse_add_rms_norm,
      static_cast<size_t>(std::max(0, options.fuse_min_rows))));
}

absl::Status AllReduceSumInto(DeviceCommunicator& comm, const void* in, void* out, size_t count,
                              DType dtype) {
  if (auto* nvlink = dynamic_cast<NvlinkCommunicator*>(&comm)) {
    return nvlink->AllReduceSumInto(in, out, count, dtype);
  }
  if (in != out && count > 0) {
    LLM_CUDA_CHECK(cudaMemcpyAsync(out, in, count * DTypeSize(dtype), cudaMemcpyDeviceToDevice,
                                   static_cast<cudaStream_t>(comm.stream())));
  }
  return comm.AllReduceSum(out, count, dtype);
}

}  // namespace llm
