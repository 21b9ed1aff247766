// MpiCommunicator under mpirun (registered with 2 and 4 ranks; works for any world size, tests
// that need a peer skip at size 1). Results are checked against references computed on the
// host in double precision from the very values every rank contributed.
#include "parallel/mpi_communicator.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/core/dtype.h"
#include "parallel/topology.h"
#include "tests/parallel/mpi_test_env.h"
#include "tests/parallel/test_values.h"

namespace llm {
namespace {

using ::llm::testing::Decode;
using ::llm::testing::Encode;
using ::llm::testing::kTestTimeout;
using ::llm::testing::MpiTestEnvironment;
using ::llm::testing::RankValues;
using ::llm::testing::Tolerance;
using ::llm::testing::Value;
using ::testing::AllOf;
using ::testing::HasSubstr;

[[maybe_unused]] ::testing::Environment* const kEnv =
    ::testing::AddGlobalTestEnvironment(new MpiTestEnvironment);

MpiCommunicator& World() { return MpiTestEnvironment::world(); }

// --- all-reduce -----------------------------------------------------------------------------

struct ReduceCase {
  DType dtype;
  size_t count;
};

class AllReduceTest : public ::testing::TestWithParam<ReduceCase> {};

TEST_P(AllReduceTest, SumMatchesDoubleReferenceOnEveryRank) {
  const auto [dtype, count] = GetParam();
  MpiCommunicator& world = World();
  std::vector<uint8_t> data = Encode(dtype, RankValues(dtype, world.rank(), count));
  ASSERT_TRUE(world.AllReduceSum(data.data(), count, dtype).ok());
  const std::vector<double> got = Decode(dtype, data);
  int bad = 0;
  for (size_t i = 0; i < count && bad < 5; ++i) {
    double ref = 0;
    for (int r = 0; r < world.size(); ++r) ref += Value(dtype, r, i);
    if (std::abs(got[i] - ref) > Tolerance(dtype, ref)) {
      ++bad;
      ADD_FAILURE() << DTypeName(dtype) << " index " << i << ": got " << got[i] << ", want " << ref;
    }
  }
  // Every rank holds the same bits.
  std::vector<uint8_t> all(data.size() * world.size());
  ASSERT_TRUE(world.AllGather(data.data(), all.data(), data.size(), DType::kU8).ok());
  for (int r = 0; r < world.size(); ++r) {
    EXPECT_EQ(std::memcmp(all.data() + r * data.size(), data.data(), data.size()), 0)
        << "rank " << r << " reduced to different bits";
  }
}

std::string ReduceName(const ::testing::TestParamInfo<ReduceCase>& info) {
  return absl::StrCat(std::string(DTypeName(info.param.dtype)), "_", info.param.count);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, AllReduceTest,
                         ::testing::Values(ReduceCase{DType::kF32, 1}, ReduceCase{DType::kF32, 4099},
                                           ReduceCase{DType::kF32, 1 << 18}, ReduceCase{DType::kF16, 1},
                                           ReduceCase{DType::kF16, 4099}, ReduceCase{DType::kBF16, 1},
                                           ReduceCase{DType::kBF16, 4099}, ReduceCase{DType::kBF16, 1 << 18},
                                           ReduceCase{DType::kI32, 4099}, ReduceCase{DType::kI64, 257}),
                         ReduceName);

TEST(MpiCommunicatorTest, AllReduceRejectsUint8) {
  uint8_t x = 1;
  EXPECT_EQ(World().AllReduceSum(&x, 1, DType::kU8).code(), absl::StatusCode::kInvalidArgument);
}

// --- all-gather / broadcast -----------------------------------------------------------------

TEST(MpiCommunicatorTest, AllGatherPlacesEachRankAtItsOffset) {
  MpiCommunicator& world = World();
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kI64}) {
    const size_t count = 1000;
    const std::vector<uint8_t> send = Encode(dtype, RankValues(dtype, world.rank(), count));
    std::vector<uint8_t> recv(send.size() * world.size(), 0xee);
    ASSERT_TRUE(world.AllGather(send.data(), recv.data(), count, dtype).ok());
    const std::vector<double> got = Decode(dtype, recv);
    for (int r = 0; r < world.size(); ++r) {
      for (size_t i = 0; i < count; ++i) {
        ASSERT_EQ(got[r * count + i], Value(dtype, r, i)) << "rank " << r << " index " << i;
      }
    }
  }
}

TEST(MpiCommunicatorTest, AllGatherInPlace) {
  MpiCommunicator& world = World();
  const size_t count = 33;
  std::vector<int32_t> buf(count * world.size(), -1);
  for (size_t i = 0; i < count; ++i) buf[world.rank() * count + i] = world.rank() * 1000 + i;
  ASSERT_TRUE(world.AllGather(buf.data() + world.rank() * count, buf.data(), count, DType::kI32).ok());
  for (int r = 0; r < world.size(); ++r) {
    for (size_t i = 0; i < count; ++i) ASSERT_EQ(buf[r * count + i], r * 1000 + int(i));
  }
}

TEST(MpiCommunicatorTest, BroadcastFromLastRank) {
  MpiCommunicator& world = World();
  const int root = world.size() - 1;
  for (DType dtype : {DType::kF32, DType::kF16, DType::kI32}) {
    const size_t count = 5000;
    std::vector<uint8_t> data = world.rank() == root ? Encode(dtype, RankValues(dtype, root, count))
                                                     : std::vector<uint8_t>(count * DTypeSize(dtype), 0);
    ASSERT_TRUE(world.Broadcast(data.data(), count, dtype, root).ok());
    EXPECT_EQ(Decode(dtype, data), RankValues(dtype, root, count)) << DTypeName(dtype);
  }
  int32_t x = 0;
  EXPECT_EQ(world.Broadcast(&x, 1, DType::kI32, world.size()).code(), absl::StatusCode::kInvalidArgument);
}

// --- point to point ---------------------------------------------------------------------------

class RingTest : public ::testing::TestWithParam<size_t> {};

TEST_P(RingTest, SendToNextReceiveFromPrevious) {
  MpiCommunicator& world = World();
  if (world.size() < 2) GTEST_SKIP() << "needs at least 2 ranks";
  const size_t count = GetParam();  // small: eager; large: rendezvous (needs the matching recv)
  const int next = (world.rank() + 1) % world.size();
  const int prev = (world.rank() + world.size() - 1) % world.size();
  const std::vector<uint8_t> send = Encode(DType::kF32, RankValues(DType::kF32, world.rank(), count));
  std::vector<uint8_t> recv(send.size(), 0);
  // Even ranks send first, odd ranks receive first: no cycle of waiting sends at any size.
  if (world.rank() % 2 == 0) {
    ASSERT_TRUE(world.Send(send.data(), count, DType::kF32, next).ok());
    ASSERT_TRUE(world.Recv(recv.data(), count, DType::kF32, prev).ok());
  } else {
    ASSERT_TRUE(world.Recv(recv.data(), count, DType::kF32, prev).ok());
    ASSERT_TRUE(world.Send(send.data(), count, DType::kF32, next).ok());
  }
  EXPECT_EQ(Decode(DType::kF32, recv), RankValues(DType::kF32, prev, count));
}

INSTANTIATE_TEST_SUITE_P(Sizes, RingTest, ::testing::Values(size_t{7}, size_t{1} << 20));

TEST(MpiCommunicatorTest, SendToSelfOrOutOfRangeIsInvalid) {
  MpiCommunicator& world = World();
  float x = 0;
  EXPECT_EQ(world.Send(&x, 1, DType::kF32, world.rank()).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(world.Recv(&x, 1, DType::kF32, world.size()).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(world.Recv(&x, 1, DType::kF32, -1).code(), absl::StatusCode::kInvalidArgument);
}

// --- control plane ----------------------------------------------------------------------------

TEST(MpiCommunicatorTest, BroadcastBytesOfAnyLength) {
  MpiCommunicator& world = World();
  std::string big(3 << 20, '\0');
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>((i * 131) ^ (i >> 9));
  for (int root : {0, world.size() - 1}) {
    for (const std::string& payload : {std::string(), std::string("x"), std::string("step\0plan", 9), big}) {
      std::string bytes = world.rank() == root ? payload : std::string("stale contents");
      ASSERT_TRUE(world.BroadcastBytes(&bytes, root).ok());
      EXPECT_EQ(bytes.size(), payload.size()) << "root " << root;
      EXPECT_TRUE(bytes == payload) << "root " << root << " length " << payload.size();
    }
  }
}

// --- groups -----------------------------------------------------------------------------------

TEST(MpiCommunicatorTest, ParallelGroupsForEveryFactorization) {
  const MpiRuntime& rt = MpiTestEnvironment::runtime();
  const int world_size = rt.world_size();
  for (int tp = 1; tp <= world_size; ++tp) {
    if (world_size % tp != 0) continue;
    const int pp = world_size / tp;
    SCOPED_TRACE(absl::StrCat("tp ", tp, " pp ", pp));
    auto topology = rt.MakeTopology(tp, pp);
    ASSERT_TRUE(topology.ok()) << topology.status();
    auto groups = MakeParallelGroups(rt, *topology, MpiCommOptions{.timeout = kTestTimeout});
    ASSERT_TRUE(groups.ok()) << groups.status();
    MpiCommunicator& tp_comm = *groups->tp;
    MpiCommunicator& pp_comm = *groups->pp;
    EXPECT_EQ(groups->world->size(), world_size);
    EXPECT_EQ(tp_comm.size(), tp);
    EXPECT_EQ(tp_comm.rank(), topology->tp_rank());
    EXPECT_EQ(tp_comm.world_ranks(), topology->TpGroupRanks());
    EXPECT_EQ(pp_comm.size(), pp);
    EXPECT_EQ(pp_comm.rank(), topology->pp_stage());
    EXPECT_EQ(pp_comm.world_ranks(), topology->PpGroupRanks());

    // TP all-reduce sums the world ranks of my stage only.
    int64_t x = rt.world_rank();
    ASSERT_TRUE(tp_comm.AllReduceSum(&x, 1, DType::kI64).ok());
    int64_t want = 0;
    for (int r : topology->TpGroupRanks()) want += r;
    EXPECT_EQ(x, want);

    // PP: an activation walks the stages, each adding its world rank.
    double act = 0;
    if (!topology->is_first_stage()) {
      ASSERT_TRUE(pp_comm.Recv(&act, 8, DType::kU8, topology->pp_stage() - 1).ok());
    }
    act = act * 10 + rt.world_rank() + 1;
    if (!topology->is_last_stage()) {
      ASSERT_TRUE(pp_comm.Send(&act, 8, DType::kU8, topology->pp_stage() + 1).ok());
    }
    double expect = 0;
    for (int s = 0; s <= topology->pp_stage(); ++s) {
      expect = expect * 10 + topology->RankAt(s, topology->tp_rank()) + 1;
    }
    EXPECT_EQ(act, expect);
  }
}

TEST(MpiCommunicatorTest, SizeOneGroupsNeverWait) {
  MpiCommunicator& world = World();
  auto self = world.Split(world.rank(), 0, "self");
  ASSERT_TRUE(self.ok()) << self.status();
  MpiCommunicator& comm = **self;
  EXPECT_EQ(comm.size(), 1);
  EXPECT_EQ(comm.rank(), 0);
  EXPECT_EQ(comm.world_ranks(), std::vector<int>{world.rank()});
  std::vector<float> v = {1.5f, -2.0f};
  ASSERT_TRUE(comm.AllReduceSum(v.data(), 2, DType::kF32).ok());
  EXPECT_EQ(v, (std::vector<float>{1.5f, -2.0f}));
  std::vector<float> out(2);
  ASSERT_TRUE(comm.AllGather(v.data(), out.data(), 2, DType::kF32).ok());
  EXPECT_EQ(out, v);
  ASSERT_TRUE(comm.Broadcast(v.data(), 2, DType::kF32, 0).ok());
  std::string bytes = "keep";
  ASSERT_TRUE(comm.BroadcastBytes(&bytes, 0).ok());
  EXPECT_EQ(bytes, "keep");
  ASSERT_TRUE(comm.Barrier().ok());
  EXPECT_EQ(comm.Send(v.data(), 2, DType::kF32, 0).code(), absl::StatusCode::kInvalidArgument);
}

// --- deadlines --------------------------------------------------------------------------------

TEST(MpiDeadlineTest, RecvFromSilentPeerTimesOutAndCommunicatorRecovers) {
  MpiCommunicator& world = World();
  if (world.size() < 2) GTEST_SKIP() << "needs at least 2 ranks";
  auto split = world.Split(0, world.rank(), "deadline");
  ASSERT_TRUE(split.ok()) << split.status();
  MpiCommunicator& comm = **split;
  if (comm.rank() == 0) {
    comm.set_timeout(absl::Seconds(1));
    float x = 0;
    const absl::Time start = absl::Now();
    const absl::Status s = comm.Recv(&x, 1, DType::kF32, 1);  // rank 1 never sends
    const absl::Duration waited = absl::Now() - start;
    EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
    EXPECT_THAT(std::string(s.message()), HasSubstr("Recv"));
    EXPECT_THAT(std::string(s.message()), HasSubstr("peer rank 1"));
    EXPECT_GE(waited, absl::Milliseconds(900));
    EXPECT_LT(waited, absl::Seconds(5));
    EXPECT_FALSE(comm.broken()) << "a cancelled receive leaves the communicator usable";
    comm.set_timeout(kTestTimeout);
  }
  // Everyone meets again, and the same communicator still works.
  ASSERT_TRUE(world.Barrier().ok());
  int32_t one = 1;
  ASSERT_TRUE(comm.AllReduceSum(&one, 1, DType::kI32).ok());
  EXPECT_EQ(one, comm.size());
}

TEST(MpiDeadlineTest, RendezvousSendToSilentPeerTimesOut) {
  MpiCommunicator& world = World();
  if (world.size() < 2) GTEST_SKIP() << "needs at least 2 ranks";
  auto split = world.Split(0, world.rank(), "send-deadline");
  ASSERT_TRUE(split.ok()) << split.status();
  MpiCommunicator& comm = **split;
  // Large enough that MPI needs the receiver (no eager buffering).
  static std::vector<float> payload(4 << 20, 1.0f);
  int32_t rank0_broken = 0;
  if (comm.rank() == 0) {
    comm.set_timeout(absl::Seconds(1));
    const absl::Status s = comm.Send(payload.data(), payload.size(), DType::kF32, 1);
    EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
    EXPECT_THAT(std::string(s.message()), HasSubstr("Send"));
    rank0_broken = comm.broken();
  }
  ASSERT_TRUE(world.Broadcast(&rank0_broken, 1, DType::kI32, 0).ok());
  if (rank0_broken) {
    // MPI could not cancel the send: it stays pending, so receive it late to let it drain.
    if (comm.rank() == 1) {
      std::vector<float> sink(payload.size());
      ASSERT_TRUE(comm.Recv(sink.data(), sink.size(), DType::kF32, 0).ok());
      EXPECT_EQ(sink[12345], 1.0f);
    }
    if (comm.rank() == 0) {
      EXPECT_EQ(comm.Barrier().code(), absl::StatusCode::kFailedPrecondition);
    }
  }
  ASSERT_TRUE(world.Barrier().ok());
}

TEST(MpiDeadlineTest, CollectiveWithMissingRanksBreaksOnlyThatCommunicator) {
  MpiCommunicator& world = World();
  if (world.size() < 2) GTEST_SKIP() << "needs at least 2 ranks";
  auto split = world.Split(0, world.rank(), "collective-deadline");
  ASSERT_TRUE(split.ok()) << split.status();
  MpiCommunicator& comm = **split;
  // MPI may still write into this buffer after the deadline: it outlives the communicator.
  static std::vector<float> data;
  data.assign(1024, 1.0f);
  if (comm.rank() == 0) {
    comm.set_timeout(absl::Seconds(1));
    const absl::Time start = absl::Now();
    const absl::Status s = comm.AllReduceSum(data.data(), data.size(), DType::kF32);
    EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
    EXPECT_THAT(std::string(s.message()), HasSubstr("AllReduceSum"));
    EXPECT_THAT(std::string(s.message()), HasSubstr("collective-deadline"));
    EXPECT_LT(absl::Now() - start, absl::Seconds(5));
    EXPECT_TRUE(comm.broken());
    EXPECT_EQ(comm.Barrier().code(), absl::StatusCode::kFailedPrecondition);
  }
  ASSERT_TRUE(world.Barrier().ok());
  // The late ranks join; rank 0's parked request completes their collective as MPI progresses
  // (rank 0 drives progress while it waits in the barrier below).
  if (comm.rank() != 0) {
    ASSERT_TRUE(comm.AllReduceSum(data.data(), data.size(), DType::kF32).ok());
    EXPECT_EQ(data[0], static_cast<float>(comm.size()));
  }
  ASSERT_TRUE(world.Barrier().ok());
}

// A rank that abandons the group's work (a step it rejects) raises an abort notice: peers waiting
// in a collective it never enters, or for a message it never sends, give up within a second with
// its reason instead of waiting out the deadline, and the group's communicators refuse every
// later call. The test's own world keeps the notice away from the other tests' communicators.
TEST(MpiAbortTest, NoticeEndsEveryPeerWaitWithinASecond) {
  if (World().size() < 2) GTEST_SKIP() << "needs at least 2 ranks";
  auto own_world = MpiCommunicator::World(MpiTestEnvironment::runtime(), MpiCommOptions{.timeout = absl::Seconds(300)});
  ASSERT_TRUE(own_world.ok()) << own_world.status();
  auto split = (*own_world)->Split(0, (*own_world)->rank(), "abort-test");
  ASSERT_TRUE(split.ok()) << split.status();
  MpiCommunicator& comm = **split;
  static std::vector<float> data;  // MPI may write the parked all-reduce's buffer later
  data.assign(256, 1.0f);
  const absl::Time start = absl::Now();
  if (comm.rank() == 1) {
    absl::SleepFor(absl::Milliseconds(200));  // the peers are waiting by now
    comm.RaiseGroupAbort("rank 1 rejected the step: a test reason");
    EXPECT_EQ(comm.AllReduceSum(data.data(), data.size(), DType::kF32).code(), absl::StatusCode::kAborted);
  } else if (comm.rank() == 0) {
    std::string bytes;  // a message rank 1 never sends (no deadline, as a worker's next step)
    comm.set_timeout(absl::InfiniteDuration());
    const absl::Status s = comm.RecvBytes(&bytes, 1);
    EXPECT_EQ(s.code(), absl::StatusCode::kAborted) << s;
    EXPECT_THAT(std::string(s.message()), HasSubstr("rank 1 abandoned the group's work: rank 1 rejected the step"));
    EXPECT_LT(absl::Now() - start, absl::Seconds(1.2));
  } else {
    const absl::Status s = comm.AllReduceSum(data.data(), data.size(), DType::kF32);
    EXPECT_EQ(s.code(), absl::StatusCode::kAborted) << s;
    EXPECT_THAT(std::string(s.message()), AllOf(HasSubstr("AllReduceSum"), HasSubstr("a test reason")));
    EXPECT_LT(absl::Now() - start, absl::Seconds(1.2));
    EXPECT_TRUE(comm.broken());
  }
  ASSERT_TRUE(comm.GroupAborted().has_value());
  EXPECT_EQ((*own_world)->Barrier().code(), absl::StatusCode::kAborted) << "an abort is final for the whole world";
  EXPECT_TRUE(World().Barrier().ok()) << "other worlds are not affected";
}

}  // namespace
}  // namespace llm
