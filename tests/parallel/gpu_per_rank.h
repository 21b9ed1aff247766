// For device-communicator tests under mpirun: every rank checks that it has a GPU of its own (and
// that the build has NCCL), the ranks agree over the world, and all of them exit 77 (ctest
// "Skipped", with a line saying why) when any cannot; CPU-only CI machines land there.
#pragma once

#include <cstdio>
#include <cstdlib>

#include "parallel/nccl_communicator.h"
#include "tests/parallel/mpi_test_env.h"

namespace llm::testing {

// Call from MpiTestEnvironment::SetUp of a derived environment, after the base SetUp.
inline void SkipUnlessOneGpuPerRank(const char* test) {
  const MpiRuntime& rt = MpiTestEnvironment::runtime();
  const int devices = CudaDeviceCount();
  int32_t have_gpu = NcclAvailable() && devices >= rt.local_size() ? 1 : 0;
  if (!MpiTestEnvironment::world().AllReduceSum(&have_gpu, 1, DType::kI32).ok()) {
    std::fprintf(stderr, "%s: GPU vote failed\n", test);
    std::abort();
  }
  if (have_gpu == MpiTestEnvironment::world().size()) return;
  std::printf("[  SKIPPED ] %s: rank %d sees %d CUDA device(s) for %d local rank(s)%s; the tests need one GPU per rank\n",
              test, rt.world_rank(), devices, rt.local_size(), NcclAvailable() ? "" : " and this build has no NCCL");
  MpiTestEnvironment::FinalizeAndExit(77);
}

}  // namespace llm::testing
