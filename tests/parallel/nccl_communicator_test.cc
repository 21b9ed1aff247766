// NcclCommunicator on device buffers, checked against host references computed in double
// precision. Needs one CUDA GPU per local rank: elsewhere (CI, this repo's build machine) every
// rank prints why and exits with 77, which ctest reports as Skipped.
// Registered twice: a plain run (one rank; single-process mode when not under an MPI launcher)
// and under mpirun with 2 ranks.
#include "parallel/nccl_communicator.h"

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/core/dtype.h"
#include "tests/parallel/gpu_per_rank.h"
#include "tests/parallel/mpi_test_env.h"
#include "tests/parallel/test_values.h"

namespace llm {
namespace {

using ::llm::testing::Decode;
using ::llm::testing::Encode;
using ::llm::testing::MpiTestEnvironment;
using ::llm::testing::RankValues;
using ::llm::testing::Value;
using ::testing::HasSubstr;

constexpr absl::Duration kNcclTimeout = absl::Seconds(120);

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "nccl_communicator_test: %s\n", what.c_str());
  std::abort();
}

class NcclTestEnvironment : public MpiTestEnvironment {
 public:
  NcclTestEnvironment()
      : MpiTestEnvironment(MpiRuntime::LaunchedByMpiLauncher() ? MpiMode::kInit : MpiMode::kSingleProcess) {}

  void SetUp() override {
    MpiTestEnvironment::SetUp();
    const MpiRuntime& rt = runtime();
    ::llm::testing::SkipUnlessOneGpuPerRank("nccl_communicator_test");
    if (cudaSetDevice(rt.local_rank()) != cudaSuccess) Die("cudaSetDevice failed");
    if (cudaStreamCreate(&stream_) != cudaSuccess) Die("cudaStreamCreate failed");
    auto comm = CreateNcclCommunicator(world(), stream_,
                                       NcclOptions{.device = rt.local_rank(), .timeout = kNcclTimeout});
    if (!comm.ok()) Die(absl::StrCat("CreateNcclCommunicator: ", comm.status().ToString()));
    comm_ = std::move(*comm);
    std::printf("rank %d: NCCL communicator of %d rank(s) on device %d\n", rt.world_rank(), comm_->size(),
                comm_->device());
  }

  void TearDown() override {
    comm_.reset();
    cudaStreamDestroy(stream_);
    MpiTestEnvironment::TearDown();
  }

  static DeviceCommunicator& comm() { return *comm_; }
  static cudaStream_t stream() { return stream_; }

 private:
  static inline std::unique_ptr<DeviceCommunicator> comm_;
  static inline cudaStream_t stream_ = nullptr;
};

[[maybe_unused]] ::testing::Environment* const kEnv =
    ::testing::AddGlobalTestEnvironment(new NcclTestEnvironment);

DeviceCommunicator& Comm() { return NcclTestEnvironment::comm(); }

// Device memory for one test buffer.
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t bytes) : bytes_(bytes) {
    if (cudaMalloc(&ptr_, bytes) != cudaSuccess) Die("cudaMalloc failed");
    cudaMemset(ptr_, 0xff, bytes);
  }
  explicit DeviceBuffer(const std::vector<uint8_t>& host) : DeviceBuffer(host.size()) {
    if (cudaMemcpy(ptr_, host.data(), host.size(), cudaMemcpyHostToDevice) != cudaSuccess) {
      Die("cudaMemcpy to device failed");
    }
  }
  ~DeviceBuffer() { cudaFree(ptr_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* get() const { return ptr_; }
  std::vector<uint8_t> Download() const {
    std::vector<uint8_t> host(bytes_);
    if (cudaMemcpy(host.data(), ptr_, bytes_, cudaMemcpyDeviceToHost) != cudaSuccess) {
      Die("cudaMemcpy to host failed");
    }
    return host;
  }

 private:
  void* ptr_ = nullptr;
  size_t bytes_;
};

// NCCL reduces 16-bit floats hop by hop, rounding at each: allow one rounding per rank.
double NcclTolerance(DType t, double sum_abs, int ranks) {
  switch (t) {
    case DType::kF32:
      return 1e-6 * sum_abs + 1e-6;
    case DType::kF16:
      return ranks * std::ldexp(1.0, -11) * sum_abs + 1e-4;
    case DType::kBF16:
      return ranks * std::ldexp(1.0, -8) * sum_abs + 1e-3;
    default:
      return 0;
  }
}

struct ReduceCase {
  DType dtype;
  size_t count;
};

class NcclAllReduceTest : public ::testing::TestWithParam<ReduceCase> {};

TEST_P(NcclAllReduceTest, SumMatchesDoubleReference) {
  const auto [dtype, count] = GetParam();
  DeviceCommunicator& comm = Comm();
  DeviceBuffer buf(Encode(dtype, RankValues(dtype, comm.rank(), count)));
  ASSERT_TRUE(comm.AllReduceSum(buf.get(), count, dtype).ok());
  ASSERT_TRUE(comm.Synchronize().ok());
  const std::vector<uint8_t> bytes = buf.Download();
  const std::vector<double> got = Decode(dtype, bytes);
  int bad = 0;
  for (size_t i = 0; i < count && bad < 5; ++i) {
    double ref = 0, sum_abs = 0;
    for (int r = 0; r < comm.size(); ++r) {
      ref += Value(dtype, r, i);
      sum_abs += std::abs(Value(dtype, r, i));
    }
    if (std::abs(got[i] - ref) > NcclTolerance(dtype, sum_abs, comm.size())) {
      ++bad;
      ADD_FAILURE() << DTypeName(dtype) << " index " << i << ": got " << got[i] << ", want " << ref;
    }
  }
  // Every rank holds the same bits (compared over the MPI control plane).
  MpiCommunicator& world = MpiTestEnvironment::world();
  std::vector<uint8_t> all(bytes.size() * world.size());
  ASSERT_TRUE(world.AllGather(bytes.data(), all.data(), bytes.size(), DType::kU8).ok());
  for (int r = 0; r < world.size(); ++r) {
    EXPECT_EQ(std::memcmp(all.data() + r * bytes.size(), bytes.data(), bytes.size()), 0)
        << "rank " << r << " reduced to different bits";
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, NcclAllReduceTest,
                         ::testing::Values(ReduceCase{DType::kF32, 1}, ReduceCase{DType::kF32, 4099},
                                           ReduceCase{DType::kF32, 1 << 22}, ReduceCase{DType::kF16, 4099},
                                           ReduceCase{DType::kBF16, 4099}, ReduceCase{DType::kBF16, 1 << 22},
                                           ReduceCase{DType::kI32, 1 << 16}),
                         [](const ::testing::TestParamInfo<ReduceCase>& info) {
                           return absl::StrCat(std::string(DTypeName(info.param.dtype)), "_",
                                               info.param.count);
                         });

TEST(NcclCommunicatorTest, AllGatherPlacesEachRankAtItsOffset) {
  DeviceCommunicator& comm = Comm();
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    const size_t count = 100003;
    DeviceBuffer send(Encode(dtype, RankValues(dtype, comm.rank(), count)));
    DeviceBuffer recv(count * DTypeSize(dtype) * comm.size());
    ASSERT_TRUE(comm.AllGather(send.get(), recv.get(), count, dtype).ok());
    ASSERT_TRUE(comm.Synchronize().ok());
    const std::vector<double> got = Decode(dtype, recv.Download());
    for (int r = 0; r < comm.size(); ++r) {
      for (size_t i = 0; i < count; ++i) {
        ASSERT_EQ(got[r * count + i], Value(dtype, r, i)) << "rank " << r << " index " << i;
      }
    }
  }
}

TEST(NcclCommunicatorTest, BroadcastFromLastRank) {
  DeviceCommunicator& comm = Comm();
  const int root = comm.size() - 1;
  const size_t count = 65537;
  DeviceBuffer buf(comm.rank() == root ? Encode(DType::kF32, RankValues(DType::kF32, root, count))
                                       : std::vector<uint8_t>(count * 4, 0));
  ASSERT_TRUE(comm.Broadcast(buf.get(), count, DType::kF32, root).ok());
  ASSERT_TRUE(comm.Synchronize().ok());
  EXPECT_EQ(Decode(DType::kF32, buf.Download()), RankValues(DType::kF32, root, count));
}

TEST(NcclCommunicatorTest, SendRecvRing) {
  DeviceCommunicator& comm = Comm();
  if (comm.size() < 2) GTEST_SKIP() << "needs at least 2 ranks";
  const size_t count = 1 << 20;
  const int next = (comm.rank() + 1) % comm.size();
  const int prev = (comm.rank() + comm.size() - 1) % comm.size();
  DeviceBuffer send(Encode(DType::kBF16, RankValues(DType::kBF16, comm.rank(), count)));
  DeviceBuffer recv(count * 2);
  if (comm.rank() % 2 == 0) {
    ASSERT_TRUE(comm.Send(send.get(), count, DType::kBF16, next).ok());
    ASSERT_TRUE(comm.Recv(recv.get(), count, DType::kBF16, prev).ok());
  } else {
    ASSERT_TRUE(comm.Recv(recv.get(), count, DType::kBF16, prev).ok());
    ASSERT_TRUE(comm.Send(send.get(), count, DType::kBF16, next).ok());
  }
  ASSERT_TRUE(comm.Synchronize().ok());
  EXPECT_EQ(Decode(DType::kBF16, recv.Download()), RankValues(DType::kBF16, prev, count));
}

TEST(NcclCommunicatorTest, BadArgumentsLeaveTheCommunicatorUsable) {
  DeviceCommunicator& comm = Comm();
  DeviceBuffer buf(64);
  EXPECT_EQ(comm.Send(buf.get(), 1, DType::kF32, comm.rank()).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(comm.Broadcast(buf.get(), 1, DType::kF32, comm.size()).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(comm.AllReduceSum(buf.get(), 1, DType::kU8).code(), absl::StatusCode::kInvalidArgument);
  DeviceBuffer ones(Encode(DType::kI32, std::vector<double>(16, 1.0)));
  ASSERT_TRUE(comm.AllReduceSum(ones.get(), 16, DType::kI32).ok());
  ASSERT_TRUE(comm.Synchronize().ok());
  EXPECT_EQ(Decode(DType::kI32, ones.Download())[15], comm.size());
}

TEST(NcclCommunicatorTest, NvlinkMulticastStaysOff) {
  const char* nvls = std::getenv("NCCL_NVLS_ENABLE");
  ASSERT_NE(nvls, nullptr);
  EXPECT_STREQ(nvls, "0");
}

// Rank-dependent branches below use EXPECT, never ASSERT: a rank that returned early would
// leave its peers waiting in the next collective.
TEST(NcclDeadlineTest, RecvFromSilentPeerTimesOut) {
  DeviceCommunicator& main_comm = Comm();
  if (main_comm.size() < 2) GTEST_SKIP() << "needs at least 2 ranks";
  MpiCommunicator& world = MpiTestEnvironment::world();
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  auto made = CreateNcclCommunicator(world, stream,
                                     NcclOptions{.device = main_comm.device(), .timeout = absl::Seconds(3)});
  ASSERT_TRUE(made.ok()) << made.status();
  DeviceCommunicator& comm = **made;
  DeviceBuffer buf(1024);
  if (comm.rank() == 0) {
    const absl::Time start = absl::Now();
    // Rank 1 never sends. NCCL connects a new pair of peers lazily, which needs the peer, so
    // either the enqueue or Synchronize (the kernel waits for data) meets the deadline.
    absl::Status s = comm.Recv(buf.get(), 256, DType::kF32, 1);
    if (s.ok()) s = comm.Synchronize();
    EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
    EXPECT_THAT(std::string(s.message()), HasSubstr("within"));
    EXPECT_LT(absl::Now() - start, absl::Seconds(30));
    EXPECT_EQ(comm.AllReduceSum(buf.get(), 1, DType::kF32).code(), absl::StatusCode::kFailedPrecondition)
        << "the communicator is aborted after a deadline";
  }
  EXPECT_TRUE(world.Barrier().ok());
  made->reset();
  cudaStreamDestroy(stream);
  // The main communicator is unaffected.
  DeviceBuffer ones(Encode(DType::kI32, std::vector<double>(4, 1.0)));
  ASSERT_TRUE(main_comm.AllReduceSum(ones.get(), 4, DType::kI32).ok());
  ASSERT_TRUE(main_comm.Synchronize().ok());
  EXPECT_EQ(Decode(DType::kI32, ones.Download())[0], main_comm.size());
}

TEST(NcclDeadlineTest, InitWithMissingPeerTimesOut) {
  DeviceCommunicator& main_comm = Comm();
  if (main_comm.size() < 2) GTEST_SKIP() << "needs at least 2 ranks";
  MpiCommunicator& world = MpiTestEnvironment::world();
  std::string id;
  if (world.rank() == 0) {
    absl::StatusOr<std::string> made = NewNcclUniqueId();
    EXPECT_TRUE(made.ok()) << made.status();
    if (made.ok()) id = *made;
  }
  ASSERT_TRUE(world.BroadcastBytes(&id, 0).ok());
  if (world.rank() == 0) {  // the other ranks never join
    const absl::Time start = absl::Now();
    auto comm = CreateNcclCommunicatorFromId(
        id, 0, world.size(), nullptr, NcclOptions{.device = main_comm.device(), .timeout = absl::Seconds(3)},
        "lonely");
    EXPECT_EQ(comm.status().code(), absl::StatusCode::kDeadlineExceeded) << comm.status();
    EXPECT_THAT(std::string(comm.status().message()), HasSubstr("lonely"));
    EXPECT_LT(absl::Now() - start, absl::Seconds(30));
  }
  EXPECT_TRUE(world.Barrier().ok());
}

TEST(NcclCommunicatorTest, FromIdRejectsMalformedIds) {
  auto comm = CreateNcclCommunicatorFromId("short", 0, 1, nullptr, NcclOptions{});
  EXPECT_EQ(comm.status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace llm
