// CreateBackend: the one place that picks a Backend implementation from flags
// (--device cpu|cuda, --dtype bf16|fp16|fp32, device index, CPU threads, --gpu-memory-fraction).
#pragma once

#include <memory>
#include <optional>
#include <string_view>

#include "absl/status/statusor.h"
#include "engine/backend/backend.h"

namespace llm {

struct BackendOptions {
  DeviceKind device = DeviceKind::kCpu;
  // Unset: the device's default (CPU float32, CUDA bf16). The CPU backend computes in float32
  // only.
  std::optional<DType> dtype;
  int device_index = 0;  // CUDA device
  int num_threads = 0;   // CPU threads; 0: all
  // CUDA: the share of the device's total memory reserved at start-up for everything the backend
  // allocates, in (0, 1] (see CudaBackendOptions::memory_fraction). Ignored on the CPU.
  double gpu_memory_fraction = 0.9;
  // CUDA: per-shape timing of the decode linear kernels (CudaBackendOptions::autotune_linear).
  bool time_linear_kernels = true;
  // CPU: quantize linear inputs to FP8 as the weights declare (CpuBackendOptions).
  bool emulate_fp8_activations = false;
};

// "cpu" or "cuda" (also "gpu").
absl::StatusOr<DeviceKind> ParseDeviceKind(std::string_view name);

// Whether this binary was built with the CUDA backend.
bool CudaBackendBuilt();

// Unavailable (with the reason) when CUDA was requested but not built or no GPU is usable;
// InvalidArgument for a dtype the device does not support.
absl::StatusOr<std::unique_ptr<Backend>> CreateBackend(const BackendOptions& options);

}  // namespace llm
