// Internal: CUDA and NCCL return codes to absl::Status, recording the statement, file, line and
// device. Includes cuda_runtime.h and nccl.h; only .cc files compiled with CUDA include it.
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace llm::internal {

inline absl::Status CudaStatus(cudaError_t err, const char* stmt, const char* file, int line) {
  if (err == cudaSuccess) return absl::OkStatus();
  int device = -1;
  cudaGetDevice(&device);
  return absl::InternalError(absl::StrCat(stmt, " failed at ", file, ":", line, " on device ", device, ": ",
                                          cudaGetErrorName(err), ": ", cudaGetErrorString(err)));
}

// `comm` (may be null) adds NCCL's last error message for that communicator.
inline absl::Status NcclStatus(ncclResult_t res, const char* stmt, const char* file, int line,
                               ncclComm_t comm = nullptr) {
  if (res == ncclSuccess) return absl::OkStatus();
  int device = -1;
  cudaGetDevice(&device);
  std::string message = absl::StrCat(stmt, " failed at ", file, ":", line, " on device ", device, ": ",
                                     ncclGetErrorString(res));
  const char* last = ncclGetLastError(comm);
  if (last != nullptr && last[0] != '\0') absl::StrAppend(&message, " (", last, ")");
  if (res == ncclInvalidArgument || res == ncclInvalidUsage) {
    return absl::InvalidArgumentError(message);
  }
  return absl::InternalError(message);
}

}  // namespace llm::internal

#define LLM_CUDA_CHECK(stmt)                                                                          \
  do {                                                                                                \
    ::absl::Status llm_cuda_status_ = ::llm::internal::CudaStatus((stmt), #stmt, __FILE__, __LINE__); \
    if (!llm_cuda_status_.ok()) return llm_cuda_status_;                                              \
  } while (0)

// For NCCL calls that are not bound to a non-blocking communicator (ncclGetUniqueId, ...).
#define LLM_NCCL_CHECK(stmt)                                                                          \
  do {                                                                                                \
    ::absl::Status llm_nccl_status_ = ::llm::internal::NcclStatus((stmt), #stmt, __FILE__, __LINE__); \
    if (!llm_nccl_status_.ok()) return llm_nccl_status_;                                              \
  } while (0)
