// NcclCommunicator: the DeviceCommunicator of llm_parallel_nccl in builds with CUDA and NCCL.
#include "parallel/nccl_communicator.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "kernels/core/status.h"
#include "parallel/internal/backoff.h"
#include "parallel/internal/cuda_check.h"

namespace llm {
namespace {

// NVLink multicast (NVLS) can put a shared host's GPUs out of service for a long time: keep it
// off unless the caller decided otherwise by setting the variable. NCCL reads its environment
// when the first communicator is created, so this runs before ncclCommInitRankConfig.
void KeepNvlsOffUnlessSet() { setenv("NCCL_NVLS_ENABLE", "0", /*overwrite=*/0); }

ncclDataType_t NcclType(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return ncclFloat32;
    case DType::kF16:
      return ncclFloat16;
    case DType::kBF16:
      return ncclBfloat16;
    case DType::kI32:
      return ncclInt32;
    case DType::kI64:
      return ncclInt64;
    case DType::kU8:
    case DType::kF8E4M3:  // moved as bytes, never reduced
      return ncclUint8;
    case DType::kU4:  // never a tensor's dtype
      break;
  }
  return ncclUint8;
}

// Polls a non-blocking communicator until it leaves ncclInProgress or the deadline passes
// (then *state stays ncclInProgress and false is returned).
bool PollComm(ncclComm_t comm, absl::Time deadline, ncclResult_t* state) {
  const absl::Time start = absl::Now();
  for (int i = 0;; ++i) {
    const ncclResult_t r = ncclCommGetAsyncError(comm, state);
    if (r != ncclSuccess) {
      *state = r;
      return true;
    }
    if (*state != ncclInProgress) return true;
    if (absl::Now() >= deadline) return false;
    internal::Backoff(i, start);
  }
}

class NcclCommunicator final : public DeviceCommunicator {
 public:
  NcclCommunicator(ncclComm_t comm, int rank, int size, int device, cudaStream_t stream, std::string name,
                   absl::Duration timeout)
      : comm_(comm),
        rank_(rank),
        size_(size),
        device_(device),
        stream_(stream),
        name_(std::move(name)),
        timeout_(timeout) {}
  ~NcclCommunicator() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  absl::Status AllReduceSum(void* data, size_t count, DType dtype) override;
  absl::Status AllGather(const void* send, void* recv, size_t count, DType dtype) override;
  absl::Status Broadcast(void* data, size_t count, DType dtype, int root) override;
  absl::Status Send(const void* data, size_t count, DType dtype, int peer) override;
  absl::Status Recv(void* data, size_t count, DType dtype, int peer) override;
  absl::Status Synchronize() override;
  void* stream() const override { return stream_; }
  int device() const override { return device_; }
  bool CapturableInGraph() const override { return true; }

 private:
  absl::Status CheckUsable(const char* op) const;
  absl::Status CheckPeer(const char* op, int peer) const;
  // Completes one enqueue call: waits out ncclInProgress (non-blocking communicator) until the
  // deadline, maps errors; aborts the communicator when it cannot be used any more.
  absl::Status Enqueued(ncclResult_t res, const char* stmt, const char* file, int line, const char* op);
  std::string Describe(const char* op) const;
  absl::Status Abort(absl::Status why);

  ncclComm_t comm_;  // null once aborted
  int rank_;
  int size_;
  int device_;
  cudaStream_t stream_;
  std::string name_;
  absl::Duration timeout_;
};

#define LLM_NCCL_ENQUEUE(op, stmt) Enqueued((stmt), #stmt, __FILE__, __LINE__, op)

NcclCommunicator::~NcclCommunicator() {
  if (comm_ == nullptr) return;
  // Finalize flushes what is still enqueued; past the deadline (a peer that never comes), abort.
  ncclResult_t state = ncclCommFinalize(comm_);
  if (state == ncclInProgress || state == ncclSuccess) {
    if (!PollComm(comm_, absl::Now() + timeout_, &state)) state = ncclInProgress;
  }
  if (state == ncclSuccess) {
    ncclCommDestroy(comm_);
  } else {
    ncclCommAbort(comm_);
  }
}

std::string NcclCommunicator::Describe(const char* op) const {
  return absl::StrCat("NCCL ", op, " on ", name_, " communicator (rank ", rank_, "/", size_, ", device ",
                      device_, ")");
}

absl::Status NcclCommunicator::Abort(absl::Status why) {
  if (comm_ != nullptr) {
    ncclCommAbort(comm_);
    comm_ = nullptr;
  }
  return why;
}

absl::Status NcclCommunicator::CheckUsable(const char* op) const {
  if (comm_ == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat(Describe(op), ": communicator was aborted after an earlier error"));
  }
  return absl::OkStatus();
}

absl::Status NcclCommunicator::CheckPeer(const char* op, int peer) const {
  if (peer < 0 || peer >= size_ || peer == rank_) {
    return absl::InvalidArgumentError(
        absl::StrCat(Describe(op), ": peer ", peer, " must be another rank in [0, ", size_, ")"));
  }
  return absl::OkStatus();
}

absl::Status NcclCommunicator::Enqueued(ncclResult_t res, const char* stmt, const char* file, int line,
                                        const char* op) {
  if (res == ncclInProgress) {
    if (!PollComm(comm_, absl::Now() + timeout_, &res)) {
      return Abort(absl::DeadlineExceededError(
          absl::StrCat(Describe(op), ": enqueue did not complete within ", absl::FormatDuration(timeout_))));
    }
  }
  if (res == ncclSuccess) return absl::OkStatus();
  absl::Status s = internal::NcclStatus(res, stmt, file, line, comm_);
  // Argument errors leave the communicator intact; anything else poisons it.
  if (absl::IsInvalidArgument(s)) return s;
  return Abort(std::move(s));
}

absl::Status NcclCommunicator::AllReduceSum(void* data, size_t count, DType dtype) {
  RETURN_IF_ERROR(CheckUsable("AllReduceSum"));
  if (dtype == DType::kU8) {
    return absl::InvalidArgumentError("AllReduceSum: uint8 is not a summable dtype");
  }
  if (count == 0) return absl::OkStatus();
  return LLM_NCCL_ENQUEUE("AllReduceSum",
                          ncclAllReduce(data, data, count, NcclType(dtype), ncclSum, comm_, stream_));
}

absl::Status NcclCommunicator::AllGather(const void* send, void* recv, size_t count, DType dtype) {
  RETURN_IF_ERROR(CheckUsable("AllGather"));
  if (count == 0) return absl::OkStatus();
  // In place when send == recv + rank * count elements (NCCL detects it).
  return LLM_NCCL_ENQUEUE("AllGather", ncclAllGather(send, recv, count, NcclType(dtype), comm_, stream_));
}

absl::Status NcclCommunicator::Broadcast(void* data, size_t count, DType dtype, int root) {
  RETURN_IF_ERROR(CheckUsable("Broadcast"));
  if (root < 0 || root >= size_) {
    return absl::InvalidArgumentError(
        absl::StrCat(Describe("Broadcast"), ": root ", root, " out of range [0, ", size_, ")"));
  }
  if (count == 0) return absl::OkStatus();
  return LLM_NCCL_ENQUEUE("Broadcast",
                          ncclBroadcast(data, data, count, NcclType(dtype), root, comm_, stream_));
}

absl::Status NcclCommunicator::Send(const void* data, size_t count, DType dtype, int peer) {
  RETURN_IF_ERROR(CheckUsable("Send"));
  RETURN_IF_ERROR(CheckPeer("Send", peer));
  if (count == 0) return absl::OkStatus();
  return LLM_NCCL_ENQUEUE("Send", ncclSend(data, count, NcclType(dtype), peer, comm_, stream_));
}

absl::Status NcclCommunicator::Recv(void* data, size_t count, DType dtype, int peer) {
  RETURN_IF_ERROR(CheckUsable("Recv"));
  RETURN_IF_ERROR(CheckPeer("Recv", peer));
  if (count == 0) return absl::OkStatus();
  return LLM_NCCL_ENQUEUE("Recv", ncclRecv(data, count, NcclType(dtype), peer, comm_, stream_));
}

absl::Status NcclCommunicator::Synchronize() {
  RETURN_IF_ERROR(CheckUsable("Synchronize"));
  LLM_CUDA_CHECK(cudaSetDevice(device_));
  const absl::Time start = absl::Now(), deadline = start + timeout_;
  for (int i = 0;; ++i) {
    const cudaError_t err = cudaStreamQuery(stream_);
    ncclResult_t state = ncclSuccess;
    const ncclResult_t res = ncclCommGetAsyncError(comm_, &state);
    if (res != ncclSuccess || (state != ncclSuccess && state != ncclInProgress)) {
      return Abort(internal::NcclStatus(res != ncclSuccess ? res : state, "ncclCommGetAsyncError", __FILE__,
                                        __LINE__, comm_));
    }
    if (err == cudaSuccess) return absl::OkStatus();
    if (err != cudaErrorNotReady) {
      return Abort(internal::CudaStatus(err, "cudaStreamQuery(stream_)", __FILE__, __LINE__));
    }
    if (absl::Now() >= deadline) {
      return Abort(absl::DeadlineExceededError(absl::StrCat(
          Describe("Synchronize"), ": stream did not drain within ", absl::FormatDuration(timeout_),
          " (a peer did not join a collective); communicator aborted")));
    }
    internal::Backoff(i, start);
  }
}

}  // namespace

bool NcclAvailable() { return true; }

int CudaDeviceCount() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear the error state so that later CUDA calls start clean
    return 0;
  }
  return count;
}

absl::StatusOr<std::string> NewNcclUniqueId() {
  ncclUniqueId id;
  LLM_NCCL_CHECK(ncclGetUniqueId(&id));
  return std::string(reinterpret_cast<const char*>(&id), sizeof(id));
}

absl::StatusOr<std::unique_ptr<DeviceCommunicator>> CreateNcclCommunicatorFromId(const std::string& unique_id,
                                                                                 int rank, int size,
                                                                                 void* stream,
                                                                                 const NcclOptions& options,
                                                                                 const std::string& name) {
  if (unique_id.size() != sizeof(ncclUniqueId)) {
    return absl::InvalidArgumentError(
        absl::StrCat("NCCL unique id of ", unique_id.size(), " bytes, expected ", sizeof(ncclUniqueId)));
  }
  if (size < 1 || rank < 0 || rank >= size) {
    return absl::InvalidArgumentError(absl::StrCat("NCCL rank ", rank, " out of range for size ", size));
  }
  KeepNvlsOffUnlessSet();
  const int devices = CudaDeviceCount();
  if (options.device < 0 || options.device >= devices) {
    return absl::FailedPreconditionError(absl::StrCat("NCCL communicator ", name, ": device ", options.device,
                                                      " not present (", devices, " CUDA device(s) visible)"));
  }
  LLM_CUDA_CHECK(cudaSetDevice(options.device));
  ncclUniqueId id;
  std::memcpy(&id, unique_id.data(), sizeof(id));

  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // returns at once; completion is polled below, with a deadline
  ncclComm_t comm = nullptr;
  ncclResult_t state = ncclCommInitRankConfig(&comm, size, id, rank, &config);
  if (state == ncclInProgress || state == ncclSuccess) {
    if (!PollComm(comm, absl::Now() + options.timeout, &state)) {
      ncclCommAbort(comm);
      return absl::DeadlineExceededError(absl::StrCat(
          "NCCL communicator init of ", name, " (rank ", rank, "/", size, ", device ", options.device,
          ") did not complete within ", absl::FormatDuration(options.timeout), ": a peer rank did not join"));
    }
  }
  if (state != ncclSuccess) {
    absl::Status s = internal::NcclStatus(state, "ncclCommInitRankConfig", __FILE__, __LINE__, comm);
    if (comm != nullptr) ncclCommAbort(comm);
    return s;
  }
  return std::unique_ptr<DeviceCommunicator>(new NcclCommunicator(
      comm, rank, size, options.device, static_cast<cudaStream_t>(stream), name, options.timeout));
}

absl::StatusOr<std::unique_ptr<DeviceCommunicator>> CreateNcclCommunicator(MpiCommunicator& group,
                                                                           void* stream,
                                                                           const NcclOptions& options) {
  // Rank 0 makes the id; one flag byte in front tells the others whether that worked.
  std::string message(1 + sizeof(ncclUniqueId), '\0');
  absl::Status id_status;
  if (group.rank() == 0) {
    absl::StatusOr<std::string> id = NewNcclUniqueId();
    id_status = id.status();
    if (id.ok()) {
      message[0] = 1;
      message.replace(1, id->size(), *id);
    }
  }
  RETURN_IF_ERROR(group.Broadcast(message.data(), message.size(), DType::kU8, 0));
  if (message[0] != 1) {
    if (!id_status.ok()) return id_status;
    return absl::UnavailableError(
        absl::StrCat("NCCL communicator on ", group.name(), " group: rank 0 could not create the unique id"));
  }
  return CreateNcclCommunicatorFromId(message.substr(1), group.rank(), group.size(), stream, options,
                                      group.name());
}

}  // namespace llm
