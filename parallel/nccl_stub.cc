// llm_parallel_nccl in a build without CUDA/NCCL: the same API, reporting that NCCL is absent.
#include "parallel/nccl_communicator.h"

namespace llm {

bool NcclAvailable() { return false; }

int CudaDeviceCount() { return 0; }

namespace {
absl::Status NoNccl() {
  return absl::UnimplementedError(
      "NCCL communicator unavailable: this build has no CUDA/NCCL (LLM_HAVE_CUDA is OFF)");
}
}  // namespace

absl::StatusOr<std::unique_ptr<DeviceCommunicator>> CreateNcclCommunicator(MpiCommunicator& group,
                                                                           void* stream,
                                                                           const NcclOptions& options) {
  return NoNccl();
}

absl::StatusOr<std::string> NewNcclUniqueId() { return NoNccl(); }

absl::StatusOr<std::unique_ptr<DeviceCommunicator>> CreateNcclCommunicatorFromId(const std::string& unique_id,
                                                                                 int rank, int size,
                                                                                 void* stream,
                                                                                 const NcclOptions& options,
                                                                                 const std::string& name) {
  return NoNccl();
}

}  // namespace llm
