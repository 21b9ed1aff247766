#include "benchmarks/cuda/spin_kernel.h"

#include "kernels/cuda/common/device_utils.cuh"

namespace llm::bench {
namespace {

__global__ void SpinKernel(long long nanoseconds) {
  cuda::AllowDependentLaunch();
  cuda::GridDependencyWait();
  long long start = 0, now = 0;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  } while (now - start < nanoseconds);
}

}  // namespace

cudaError_t LaunchSpin(int nanoseconds, cudaStream_t stream) {
  return cuda::LaunchKernel(SpinKernel, dim3(1), dim3(32), 0, stream, /*pdl=*/true,
                            static_cast<long long>(nanoseconds));
}

}  // namespace llm::bench
