// The device-buffer Communicator over NCCL (data plane), bootstrapped over an MpiCommunicator
// (control plane) of the same group.
//
// Declared here in every build, defined by the library llm_parallel_nccl: with CUDA and NCCL it
// holds the real implementation (parallel/nccl_communicator.cc); without them a stub whose
// NcclAvailable() is false and whose factory returns Unimplemented. Callers always link
// llm_parallel_nccl and choose at runtime; nccl.h and cuda_runtime.h stay out of this header.
//
// Semantics differ from MpiCommunicator in one way: each call ENQUEUES its operation on the
// stream given at creation and returns; buffers must be device memory of `device` and stay
// valid until the stream reaches the operation. Synchronize() waits for the stream with the
// deadline. A Send and the matching Recv on the peer must not be preceded on either stream by
// an operation that waits for the other side (order pairs as in a ring: even ranks send first).
//
// Shared GPU machines: NVLink multicast (NVLS) can take the host's GPUs out of service, so it
// must stay off. CreateNcclCommunicator sets NCCL_NVLS_ENABLE=0 in the process environment
// (setenv, before NCCL reads it) unless the variable is already set; callers who set it
// themselves must keep it 0 on such machines.
#pragma once

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "parallel/communicator.h"
#include "parallel/mpi_communicator.h"

namespace llm {

// A Communicator whose buffers live on one GPU and whose operations run on one stream.
class DeviceCommunicator : public Communicator {
 public:
  // Blocks until every operation enqueued so far has finished on the stream, or until the
  // timeout: then the NCCL communicator is aborted (its kernels stop), DeadlineExceeded is
  // returned and every later call returns FailedPrecondition. Asynchronous NCCL errors (a peer
  // process died) are reported here too.
  virtual absl::Status Synchronize() = 0;
  // The cudaStream_t passed at creation.
  virtual void* stream() const = 0;
  // The CUDA device index.
  virtual int device() const = 0;
};

struct NcclOptions {
  // CUDA device of this rank: Topology::device() (its local rank).
  int device = 0;
  // Deadline of communicator creation, of each enqueue, and of Synchronize().
  absl::Duration timeout = absl::Seconds(300);
};

// True when this build has CUDA and NCCL (llm_parallel_nccl holds the real implementation).
bool NcclAvailable();

// Number of CUDA devices visible; 0 without CUDA, without a driver or without a GPU.
int CudaDeviceCount();

// Collective over `group`: rank 0 makes the NCCL unique id, `group` broadcasts it, every rank
// joins with ncclCommInitRankConfig (non-blocking) polled until done or options.timeout
// (DeadlineExceeded, after ncclCommAbort). The NCCL rank equals group.rank(). `stream` is the
// cudaStream_t (on options.device) that every operation is enqueued on; nullptr is the legacy
// default stream. Unimplemented when !NcclAvailable().
absl::StatusOr<std::unique_ptr<DeviceCommunicator>> CreateNcclCommunicator(MpiCommunicator& group,
                                                                           void* stream,
                                                                           const NcclOptions& options);

// The two halves of CreateNcclCommunicator, for callers that bootstrap by other means:
// NewNcclUniqueId() on one rank (an opaque byte string), shipped to the others (e.g. with
// MpiCommunicator::BroadcastBytes), then CreateNcclCommunicatorFromId on every rank of the group
// with its rank in [0, size). `name` labels the communicator in errors.
absl::StatusOr<std::string> NewNcclUniqueId();
absl::StatusOr<std::unique_ptr<DeviceCommunicator>> CreateNcclCommunicatorFromId(
    const std::string& unique_id, int rank, int size, void* stream, const NcclOptions& options,
    const std::string& name = "nccl");

}  // namespace llm
