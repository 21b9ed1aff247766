// Raising a kernel's dynamic shared-memory limit (needed above 48 KiB), once per kernel, device and
// size: launchers call it before every launch, and the attribute call costs microseconds of host
// time where the lookup costs nanoseconds.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

namespace llm::cuda {

cudaError_t AllowDynamicSmem(const void* kernel, size_t bytes);

template <typename Kernel>
cudaError_t AllowDynamicSmem(Kernel* kernel, size_t bytes) {
  return AllowDynamicSmem(reinterpret_cast<const void*>(kernel), bytes);
}

}  // namespace llm::cuda
