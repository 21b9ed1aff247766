// A stand-in predecessor for kernel benchmarks: one block that lets its dependents launch
// (programmatic dependent launch) and then spins for a set time, so that a benchmark can see how
// much of a kernel's work overlaps the wait on its predecessor.
#pragma once

#include <cuda_runtime.h>

namespace llm::bench {

cudaError_t LaunchSpin(int nanoseconds, cudaStream_t stream);

}  // namespace llm::bench
