// GoogleTest global environment for multi-rank tests run under mpirun: owns the MpiRuntime
// (MPI_Init_thread in SetUp, MPI_Finalize in TearDown) and a world communicator whose
// operations carry a test deadline, so that a rank that fails early makes its peers fail with
// DeadlineExceeded instead of hanging. Every rank runs every test and reports its own results;
// mpirun's exit status is non-zero when any rank's is.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <memory>

#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "parallel/mpi_communicator.h"
#include "parallel/mpi_runtime.h"

namespace llm::testing {

// Deadline of ordinary test collectives: generous for oversubscribed CI machines.
inline constexpr absl::Duration kTestTimeout = absl::Seconds(30);

class MpiTestEnvironment : public ::testing::Environment {
 public:
  explicit MpiTestEnvironment(MpiMode mode = MpiMode::kInit) : mode_(mode) {}

  void SetUp() override {
    auto runtime = MpiRuntime::Create(mode_);
    if (!runtime.ok()) {
      std::fprintf(stderr, "MpiRuntime::Create failed: %s\n",
                   std::string(runtime.status().message()).c_str());
      std::abort();
    }
    runtime_ = std::move(*runtime);
    auto world = MpiCommunicator::World(*runtime_, MpiCommOptions{.timeout = kTestTimeout});
    if (!world.ok()) {
      std::fprintf(stderr, "MpiCommunicator::World failed: %s\n",
                   std::string(world.status().message()).c_str());
      std::abort();
    }
    world_ = std::move(*world);
  }
  void TearDown() override {
    world_.reset();
    runtime_.reset();
  }

  static MpiRuntime& runtime() { return *runtime_; }
  static MpiCommunicator& world() { return *world_; }

  // Ends the test program on every rank with `code` after finalizing MPI (77: ctest "Skipped").
  // Every rank must take the same decision.
  [[noreturn]] static void FinalizeAndExit(int code) {
    world_.reset();
    runtime_.reset();
    std::fflush(stdout);
    std::exit(code);
  }

 private:
  MpiMode mode_;
  static inline std::unique_ptr<MpiRuntime> runtime_;
  static inline std::unique_ptr<MpiCommunicator> world_;
};

}  // namespace llm::testing
