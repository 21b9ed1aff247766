// llm_parallel_nccl in a build without CUDA: no peer memory, so the NCCL communicator (which
// cannot exist either: CreateNcclCommunicator returns Unimplemented) is returned unchanged.
#include <utility>

#include "parallel/nvlink_communicator.h"

namespace llm {

absl::StatusOr<std::unique_ptr<DeviceCommunicator>> CreateNvlinkCommunicator(
    MpiCommunicator& group, std::unique_ptr<DeviceCommunicator> nccl, const NvlinkOptions& options,
    NvlinkSetup* setup) {
  if (nccl == nullptr) return absl::InvalidArgumentError("CreateNvlinkCommunicator: null NCCL communicator");
  if (setup != nullptr)
    *setup = NvlinkSetup{.one_shot = false, .capacity_bytes = 0, .reason = "build without CUDA"};
  return nccl;
}

absl::Status AllReduceSumInto(DeviceCommunicator& comm, const void* in, void* out, size_t count,
                              DType dtype) {
  if (in != out && count > 0) {
    return absl::UnimplementedError("AllReduceSumInto: out of place needs CUDA (LLM_HAVE_CUDA is OFF)");
  }
  return comm.AllReduceSum(out, count, dtype);
}

}  // namespace llm
