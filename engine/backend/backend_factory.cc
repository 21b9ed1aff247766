#include "engine/backend/backend_factory.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "engine/backend/cpu/cpu_backend.h"
#if LLM_HAVE_CUDA
#include "engine/backend/cuda/cuda_backend.h"
#endif

namespace llm {

absl::StatusOr<DeviceKind> ParseDeviceKind(std::string_view name) {
  if (name == "cpu") return DeviceKind::kCpu;
  if (name == "cuda" || name == "gpu") return DeviceKind::kCuda;
  return absl::InvalidArgumentError(absl::StrCat("unknown device '", std::string(name), "' (cpu or cuda)"));
}

bool CudaBackendBuilt() {
#if LLM_HAVE_CUDA
  return true;
#else
  return false;
#endif
}

absl::StatusOr<std::unique_ptr<Backend>> CreateBackend(const BackendOptions& options) {
  if (options.device == DeviceKind::kCpu) {
    if (options.dtype.has_value() && *options.dtype != DType::kF32)
      return absl::InvalidArgumentError(absl::StrCat("the CPU backend computes in float32 only (got --dtype ",
                                                     std::string(DTypeName(*options.dtype)), ")"));
    CpuBackendOptions cpu;
    cpu.num_threads = options.num_threads;
    cpu.emulate_fp8_activations = options.emulate_fp8_activations;
    return std::unique_ptr<Backend>(std::make_unique<CpuBackend>(cpu));
  }
#if LLM_HAVE_CUDA
  CudaBackendOptions cuda;
  cuda.device_index = options.device_index;
  cuda.dtype = options.dtype.value_or(DType::kBF16);
  cuda.memory_fraction = options.gpu_memory_fraction;
  cuda.autotune_linear = options.time_linear_kernels;
  ASSIGN_OR_RETURN(auto backend, CudaBackend::Create(cuda));
  return std::unique_ptr<Backend>(std::move(backend));
#else
  return absl::UnavailableError("this binary was built without the CUDA backend (no nvcc/NCCL at build time)");
#endif
}

}  // namespace llm
