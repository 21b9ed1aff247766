// CUDA/cuBLAS error handling for kernels/cuda and the CUDA backend: one macro family that turns a
// failed call into an absl::Status naming the statement, file, line and device.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include "absl/status/status.h"
#include "kernels/core/status.h"

namespace llm::cuda {

absl::Status CudaError(cudaError_t err, const char* stmt, const char* file, int line);
absl::Status CublasError(cublasStatus_t err, const char* stmt, const char* file, int line);

}  // namespace llm::cuda

// Evaluates a CUDA runtime call; returns an Internal/ResourceExhausted status from the enclosing
// function when it fails.
#define CUDA_RETURN_IF_ERROR(stmt)                                                  \
  do {                                                                              \
    const cudaError_t llm_cuda_err_ = (stmt);                                       \
    if (llm_cuda_err_ != cudaSuccess)                                               \
      return ::llm::cuda::CudaError(llm_cuda_err_, #stmt, __FILE__, __LINE__);      \
  } while (0)

// After a <<<...>>> launch: reports a bad configuration or an earlier asynchronous fault.
#define CUDA_RETURN_IF_LAUNCH_ERROR() CUDA_RETURN_IF_ERROR(cudaGetLastError())

#define CUBLAS_RETURN_IF_ERROR(stmt)                                                \
  do {                                                                              \
    const cublasStatus_t llm_cublas_err_ = (stmt);                                  \
    if (llm_cublas_err_ != CUBLAS_STATUS_SUCCESS)                                   \
      return ::llm::cuda::CublasError(llm_cublas_err_, #stmt, __FILE__, __LINE__);  \
  } while (0)
