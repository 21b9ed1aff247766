// Communicator: the one interface for collectives and point-to-point transfers. The MPI
// implementation moves host buffers (CPU backend, CI); the NCCL one moves device buffers on the
// stream it was created with. Scheduling, batching and the KV cache never see which one runs.
// Every call returns a Status; a peer that never answers becomes DeadlineExceeded, not a hang.
#pragma once

#include <cstddef>
#include <memory>

#include "absl/status/status.h"
#include "kernels/core/dtype.h"

namespace llm {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;

  // In place: data[i] = sum over ranks of data[i]. Floating dtypes and int32.
  virtual absl::Status AllReduceSum(void* data, size_t count, DType dtype) = 0;
  // recv holds size() * count elements, rank r's `send` at offset r * count.
  virtual absl::Status AllGather(const void* send, void* recv, size_t count, DType dtype) = 0;
  virtual absl::Status Broadcast(void* data, size_t count, DType dtype, int root) = 0;
  virtual absl::Status Send(const void* data, size_t count, DType dtype, int peer) = 0;
  virtual absl::Status Recv(void* data, size_t count, DType dtype, int peer) = 0;
  // True when the operations only enqueue device work on a stream, so that a CUDA graph captured
  // on that stream records them (NCCL and the NVLink all-reduce); host (MPI) transfers run at
  // once and cannot be part of a graph.
  virtual bool CapturableInGraph() const { return false; }

  // The tensor-parallel epilogue of a row-parallel projection, fused into the collective, on
  // row-major rows x dim tensors of `dtype`: residual += (sum over ranks of delta); then
  // out = RMSNorm(residual) * weight (`delta` is only read). Offered only by a communicator
  // that does it in one kernel (the NVLink one, for decode-sized tensors); elsewhere the caller
  // runs AllReduceSum and its backend's AddRmsNorm. The answer of CanAllReduceAddRmsNorm depends
  // only on its arguments and on state that is the same on every rank, so all ranks take the
  // same path.
  virtual bool CanAllReduceAddRmsNorm(size_t rows, size_t dim, DType dtype) const { return false; }
  virtual absl::Status AllReduceAddRmsNorm(const void* delta, void* residual, const void* weight, float eps,
                                           void* out, size_t rows, size_t dim, DType dtype) {
    return absl::UnimplementedError("this communicator has no fused all-reduce + RMSNorm");
  }
};

}  // namespace llm
