#include "kernels/cuda/common/cuda_status.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace llm::cuda {
namespace {

std::string Where(const char* stmt, const char* file, int line) {
  int device = -1;
  cudaGetDevice(&device);
  return absl::StrCat(" in `", stmt, "` at ", file, ":", line, " (device ", device, ")");
}

}  // namespace

absl::Status CudaError(cudaError_t err, const char* stmt, const char* file, int line) {
  const std::string msg =
      absl::StrCat("CUDA error ", static_cast<int>(err), " ", cudaGetErrorName(err), ": ", cudaGetErrorString(err),
                   Where(stmt, file, line));
  if (err == cudaErrorMemoryAllocation) return absl::ResourceExhaustedError(msg);
  if (err == cudaErrorInvalidValue || err == cudaErrorInvalidConfiguration) return absl::InvalidArgumentError(msg);
  if (err == cudaErrorNoDevice || err == cudaErrorInsufficientDriver) return absl::UnavailableError(msg);
  return absl::InternalError(msg);
}

absl::Status CublasError(cublasStatus_t err, const char* stmt, const char* file, int line) {
  const std::string msg = absl::StrCat("cuBLAS error ", static_cast<int>(err), " ", cublasLtGetStatusName(err), ": ",
                                       cublasLtGetStatusString(err), Where(stmt, file, line));
  if (err == CUBLAS_STATUS_ALLOC_FAILED) return absl::ResourceExhaustedError(msg);
  if (err == CUBLAS_STATUS_INVALID_VALUE || err == CUBLAS_STATUS_NOT_SUPPORTED) return absl::InvalidArgumentError(msg);
  return absl::InternalError(msg);
}

}  // namespace llm::cuda
