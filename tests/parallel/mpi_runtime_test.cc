// MpiRuntime without mpirun: the single-process mode (no MPI at all), then an MPI singleton.
// The order matters (MPI cannot be initialized again after MPI_Finalize), so it is one test.
#include "parallel/mpi_runtime.h"

#include <mpi.h>

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "parallel/mpi_communicator.h"
#include "parallel/topology.h"

namespace llm {
namespace {

using ::testing::HasSubstr;

bool MpiInitialized() {
  int flag = 0;
  MPI_Initialized(&flag);
  return flag != 0;
}

// Every operation of a size-1 world works without peers.
void ExpectSoloWorldWorks(const MpiRuntime& rt) {
  auto topology = rt.MakeTopology(1, 1);
  ASSERT_TRUE(topology.ok()) << topology.status();
  EXPECT_EQ(*topology, Topology::Single());
  EXPECT_FALSE(rt.MakeTopology(2, 1).ok());
  auto groups = MakeParallelGroups(rt, *topology);
  ASSERT_TRUE(groups.ok()) << groups.status();
  for (MpiCommunicator* comm : {groups->world.get(), groups->tp.get(), groups->pp.get()}) {
    EXPECT_EQ(comm->size(), 1);
    EXPECT_EQ(comm->rank(), 0);
    std::vector<float> v = {3.0f, 4.0f};
    ASSERT_TRUE(comm->AllReduceSum(v.data(), 2, DType::kF32).ok());
    EXPECT_EQ(v[1], 4.0f);
    std::vector<float> out(2);
    ASSERT_TRUE(comm->AllGather(v.data(), out.data(), 2, DType::kF32).ok());
    EXPECT_EQ(out, v);
    std::string plan = "plan";
    ASSERT_TRUE(comm->BroadcastBytes(&plan, 0).ok());
    EXPECT_EQ(plan, "plan");
    ASSERT_TRUE(comm->Barrier().ok());
  }
  EXPECT_EQ(groups->tp->name(), "tp");
  EXPECT_EQ(groups->pp->name(), "pp");
}

TEST(MpiRuntimeTest, SingleProcessThenMpiSingleton) {
  {
    auto rt = MpiRuntime::Create(MpiMode::kSingleProcess);
    ASSERT_TRUE(rt.ok()) << rt.status();
    EXPECT_FALSE((*rt)->uses_mpi());
    EXPECT_EQ((*rt)->world_size(), 1);
    EXPECT_EQ((*rt)->local_size(), 1);
    // Single-process runtimes touch no MPI state: several may exist (engines side by side).
    auto second = MpiRuntime::Create(MpiMode::kSingleProcess);
    ASSERT_TRUE(second.ok()) << second.status();
    ExpectSoloWorldWorks(**second);
    ExpectSoloWorldWorks(**rt);
    EXPECT_FALSE(MpiInitialized()) << "single-process mode must not initialize MPI";
  }
  {
    auto rt = MpiRuntime::Create(MpiMode::kInit);
    ASSERT_TRUE(rt.ok()) << rt.status();
    EXPECT_TRUE((*rt)->uses_mpi());
    EXPECT_TRUE(MpiInitialized());
    EXPECT_EQ((*rt)->world_size(), 1) << "a plain run is an MPI singleton";
    EXPECT_EQ((*rt)->world_rank(), 0);
    EXPECT_EQ((*rt)->local_rank(), 0);
    ExpectSoloWorldWorks(**rt);
  }
  auto again = MpiRuntime::Create(MpiMode::kInit);
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(again.status().message()), HasSubstr("finalized"));
}

}  // namespace
}  // namespace llm

namespace llm {
namespace {

// A rank that can own two cores yields through a decode step's wait; oversubscribed ranks sleep
// early; the environment overrides both.
TEST(PollYieldWindowTest, FollowsCoresPerRankAndTheEnvironment) {
  EXPECT_EQ(ChoosePollYieldWindow(8, 128, nullptr), absl::Milliseconds(50));
  EXPECT_EQ(ChoosePollYieldWindow(2, 4, nullptr), absl::Milliseconds(50));
  EXPECT_EQ(ChoosePollYieldWindow(4, 2, nullptr), absl::Milliseconds(1));  // CI: 4 ranks on 2 cores
  EXPECT_EQ(ChoosePollYieldWindow(2, 3, nullptr), absl::Milliseconds(1));
  EXPECT_EQ(ChoosePollYieldWindow(4, 2, "20000"), absl::Milliseconds(20));
  EXPECT_EQ(ChoosePollYieldWindow(8, 128, "0"), absl::ZeroDuration());
  EXPECT_EQ(ChoosePollYieldWindow(8, 128, "soon"), absl::Milliseconds(50));  // unparsable: ignored
}

}  // namespace
}  // namespace llm
