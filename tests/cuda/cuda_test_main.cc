// main() of every CUDA test binary: without a usable GPU it says why and exits 77, which ctest
// reports as "Skipped" (SKIP_RETURN_CODE), so CI without GPUs stays green and honest.
#include <cuda_runtime_api.h>

#include <cstdio>

#include "gtest/gtest.h"

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // progress survives a timeout kill
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess || count == 0) {
    std::printf("SKIPPED: no CUDA GPU available (%s); the CUDA tests need one.\n",
                err != cudaSuccess ? cudaGetErrorString(err) : "0 devices");
    return 77;
  }
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  std::printf("CUDA device 0: %s, %d SMs, compute capability %d.%d\n", prop.name, prop.multiProcessorCount,
              prop.major, prop.minor);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
