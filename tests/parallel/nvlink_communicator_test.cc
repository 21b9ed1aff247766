// The NVLink all-reduce kernels (parallel/nvlink_communicator.h: push up to 512 KiB, one-shot up
// to 1 MiB, NCCL above) under mpirun with 2 ranks, checked against a float64 host sum of every
// rank's inputs (gathered over MPI) and for bit-identical results on all ranks. Needs one CUDA GPU per local
// rank: elsewhere (CI, this repo's build machine) every rank prints why and exits with 77, which ctest
// reports as Skipped. On GPUs without peer access the communicator falls back to NCCL: the tests still run
// (on NCCL tolerances), and the graph test, which is about the one-shot path, skips.
#include "parallel/nvlink_communicator.h"

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
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
using ::testing::HasSubstr;

constexpr absl::Duration kNcclTimeout = absl::Seconds(120);
// Elements after every buffer's `count`, poisoned: the kernel must never write them.
constexpr size_t kGuard = 64;

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "nvlink_communicator_test: %s\n", what.c_str());
  std::abort();
}

// An NCCL communicator of `group` on `stream`, wrapped by CreateNvlinkCommunicator.
absl::StatusOr<std::unique_ptr<DeviceCommunicator>> MakeNvlink(MpiCommunicator& group, cudaStream_t stream,
                                                               int device, const NvlinkOptions& options,
                                                               NvlinkSetup* setup) {
  auto nccl = CreateNcclCommunicator(group, stream, NcclOptions{.device = device, .timeout = kNcclTimeout});
  if (!nccl.ok()) Die(absl::StrCat("CreateNcclCommunicator: ", nccl.status().ToString()));
  return CreateNvlinkCommunicator(group, std::move(*nccl), options, setup);
}

class NvlinkTestEnvironment : public MpiTestEnvironment {
 public:
  NvlinkTestEnvironment() : MpiTestEnvironment(MpiMode::kInit) {}

  void SetUp() override {
    MpiTestEnvironment::SetUp();
    const MpiRuntime& rt = runtime();
    ::llm::testing::SkipUnlessOneGpuPerRank("nvlink_communicator_test");
    device_ = rt.local_rank();
    if (cudaSetDevice(device_) != cudaSuccess) Die("cudaSetDevice failed");
    if (cudaStreamCreate(&stream_) != cudaSuccess) Die("cudaStreamCreate failed");
    auto comm = MakeNvlink(world(), stream_, device_, NvlinkOptions{}, &setup_);
    if (!comm.ok()) Die(absl::StrCat("CreateNvlinkCommunicator: ", comm.status().ToString()));
    comm_ = std::move(*comm);
    std::printf("rank %d: device %d, one-shot all-reduce %s (capacity %zu bytes)%s%s\n", rt.world_rank(),
                device_, setup_.one_shot ? "on" : "off", setup_.capacity_bytes, setup_.one_shot ? "" : ": ",
                setup_.reason.c_str());
  }

  void TearDown() override {
    comm_.reset();  // its destructor waits on a world barrier: before the world goes
    cudaStreamDestroy(stream_);
    MpiTestEnvironment::TearDown();
  }

  static DeviceCommunicator& comm() { return *comm_; }
  static const NvlinkSetup& setup() { return setup_; }
  static cudaStream_t stream() { return stream_; }
  static int device() { return device_; }

 private:
  static inline std::unique_ptr<DeviceCommunicator> comm_;
  static inline NvlinkSetup setup_;
  static inline cudaStream_t stream_ = nullptr;
  static inline int device_ = 0;
};

[[maybe_unused]] ::testing::Environment* const kEnv =
    ::testing::AddGlobalTestEnvironment(new NvlinkTestEnvironment);

DeviceCommunicator& Comm() { return NvlinkTestEnvironment::comm(); }
MpiCommunicator& World() { return MpiTestEnvironment::world(); }
bool OneShot() { return NvlinkTestEnvironment::setup().one_shot; }
size_t CapacityElements(DType t) { return NvlinkTestEnvironment::setup().capacity_bytes / DTypeSize(t); }

// Device memory of `count + kGuard` elements of `dtype` starting `offset` elements into the
// allocation (offset 1: not 16-byte aligned, the kernel's scalar path). Poisoned with 0xff bytes,
// which is NaN in f32, f16 and bf16.
class DeviceBuffer {
 public:
  DeviceBuffer(DType dtype, size_t count, size_t offset = 0)
      : elem_(DTypeSize(dtype)), count_(count), offset_(offset), bytes_((offset + count + kGuard) * elem_) {
    if (cudaMalloc(&base_, bytes_) != cudaSuccess) Die("cudaMalloc failed");
    Poison();
  }
  ~DeviceBuffer() { cudaFree(base_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* get() const { return static_cast<char*>(base_) + offset_ * elem_; }
  void Poison() {
    if (cudaMemset(base_, 0xff, bytes_) != cudaSuccess) Die("cudaMemset failed");
  }
  // Writes `host` (count elements) at get(); the rest stays as it was.
  void Upload(const std::vector<uint8_t>& host) {
    if (cudaMemcpy(get(), host.data(), host.size(), cudaMemcpyHostToDevice) != cudaSuccess)
      Die("upload failed");
  }
  // The count elements at get().
  std::vector<uint8_t> Download() const { return Read(get(), count_ * elem_); }
  // True when every byte outside [get(), get() + count) is still 0xff.
  bool GuardsIntact() const {
    const std::vector<uint8_t> all = Read(base_, bytes_);
    for (size_t i = 0; i < all.size(); ++i) {
      const bool inside = i >= offset_ * elem_ && i < (offset_ + count_) * elem_;
      if (!inside && all[i] != 0xff) return false;
    }
    return true;
  }

 private:
  static std::vector<uint8_t> Read(const void* p, size_t bytes) {
    std::vector<uint8_t> host(bytes);
    if (cudaMemcpy(host.data(), p, bytes, cudaMemcpyDeviceToHost) != cudaSuccess) Die("download failed");
    return host;
  }

  size_t elem_, count_, offset_, bytes_;
  void* base_ = nullptr;
};

// `count` values uniform in [-1, 1], rounded into `dtype`; a different stream per seed and rank.
std::vector<uint8_t> RandomInput(DType dtype, size_t count, uint64_t seed) {
  std::mt19937_64 rng(seed * 1000003u + static_cast<uint64_t>(World().rank()) * 7919u + 17u);
  std::uniform_real_distribution<double> dist(-1.0, 1.0);
  std::vector<double> values(count);
  for (double& v : values) v = dist(rng);
  return Encode(dtype, values);
}

// Bound on |result - exact sum| for a sum over `ranks` values of total magnitude `sum_abs`.
double Tolerance(DType t, double ref, double sum_abs, int ranks, bool one_shot) {
  const double unit = t == DType::kF32   ? std::ldexp(1.0, -24)
                      : t == DType::kF16 ? std::ldexp(1.0, -11)
                                         : std::ldexp(1.0, -8);
  const double tiny = t == DType::kF16 ? 1e-7 : 1e-30;  // f16 subnormals near a zero sum
  if (one_shot) {
    // float32 accumulation in rank order, rounded once into `t`.
    return unit * std::abs(ref) + ranks * std::ldexp(1.0, -24) * sum_abs + tiny;
  }
  // NCCL may round into `t` at every hop.
  return ranks * unit * sum_abs + ranks * std::ldexp(1.0, -24) * sum_abs + tiny;
}

// Checks this rank's `got` (count elements) against the float64 sum of every rank's `input`, and
// that every rank got the same bits. Collective over the world: every rank must call it.
// `nccl`: the result came from NCCL whatever the size (wider tolerance).
void ExpectReduced(DType dtype, size_t count, const std::vector<uint8_t>& input,
                   const std::vector<uint8_t>& got, const std::string& what, bool nccl = false) {
  MpiCommunicator& world = World();
  const size_t bytes = input.size();
  std::vector<uint8_t> inputs(bytes * world.size());
  ASSERT_TRUE(world.AllGather(input.data(), inputs.data(), bytes, DType::kU8).ok());
  std::vector<uint8_t> outputs(bytes * world.size());
  ASSERT_TRUE(world.AllGather(got.data(), outputs.data(), bytes, DType::kU8).ok());

  const bool one_shot = !nccl && OneShot() && count <= CapacityElements(dtype);
  std::vector<std::vector<double>> per_rank(world.size());
  for (int r = 0; r < world.size(); ++r) {
    per_rank[r] =
        Decode(dtype, std::vector<uint8_t>(inputs.begin() + r * bytes, inputs.begin() + (r + 1) * bytes));
  }
  const std::vector<double> result = Decode(dtype, got);
  int bad = 0;
  for (size_t i = 0; i < count && bad < 5; ++i) {
    double ref = 0, sum_abs = 0;
    for (int r = 0; r < world.size(); ++r) {
      ref += per_rank[r][i];
      sum_abs += std::abs(per_rank[r][i]);
    }
    // Written this way round so that NaN (a poisoned element left unwritten) fails.
    if (!(std::abs(result[i] - ref) <= Tolerance(dtype, ref, sum_abs, world.size(), one_shot))) {
      ++bad;
      ADD_FAILURE() << what << ": index " << i << " of " << count << ": got " << result[i] << ", want " << ref
                    << (one_shot ? " (one-shot)" : " (NCCL)");
    }
  }
  for (int r = 0; r < world.size(); ++r) {
    EXPECT_EQ(std::memcmp(outputs.data() + r * bytes, got.data(), bytes), 0)
        << what << ": rank " << r << " reduced to different bits";
  }
}

std::string Name(DType dtype, size_t count) {
  return absl::StrCat(std::string(DTypeName(dtype)), " x ", count);
}

// The element counts of one dtype: tiny, odd, hidden-state shapes, and around the capacity (the
// last two take NCCL).
std::vector<size_t> Counts(DType dtype) {
  const size_t cap = CapacityElements(dtype);
  std::vector<size_t> counts = {1, 7, 8, 9, 31, 4095, 4096, 4097, 4096 * 16, 8192 * 16 + 3, 100003};
  for (size_t c : {cap - 1, cap, cap + 1, 2 * cap + 5}) {
    if (c > 0) counts.push_back(c);
  }
  return counts;
}

class NvlinkAllReduceTest : public ::testing::TestWithParam<DType> {};

// Every count, twice with fresh data, out of place (output poisoned) and in place, aligned and
// misaligned (scalar path).
TEST_P(NvlinkAllReduceTest, SumMatchesDoubleReference) {
  const DType dtype = GetParam();
  DeviceCommunicator& comm = Comm();
  const std::vector<size_t> counts = Counts(dtype);
  for (size_t c = 0; c < counts.size(); ++c) {
    const size_t count = counts[c];
    for (size_t offset : {size_t{0}, size_t{1}}) {
      for (int iteration = 0; iteration < 2; ++iteration) {
        const std::string what =
            absl::StrCat(Name(dtype, count), " offset ", offset, " iteration ", iteration);
        SCOPED_TRACE(what);
        const uint64_t seed = (static_cast<uint64_t>(dtype) * 100 + c) * 10 + offset * 4 + iteration;

        const std::vector<uint8_t> input = RandomInput(dtype, count, seed);
        DeviceBuffer in(dtype, count, offset), out(dtype, count, offset);
        in.Upload(input);
        ASSERT_TRUE(AllReduceSumInto(comm, in.get(), out.get(), count, dtype).ok());
        ASSERT_TRUE(comm.Synchronize().ok());
        ExpectReduced(dtype, count, input, out.Download(), absl::StrCat(what, " out of place"));
        EXPECT_TRUE(out.GuardsIntact()) << "written outside the output";
        EXPECT_EQ(in.Download(), input) << "input changed by an out-of-place all-reduce";

        const std::vector<uint8_t> input2 = RandomInput(dtype, count, seed + 1000000);
        DeviceBuffer buf(dtype, count, offset);
        buf.Upload(input2);
        ASSERT_TRUE(comm.AllReduceSum(buf.get(), count, dtype).ok());
        ASSERT_TRUE(comm.Synchronize().ok());
        ExpectReduced(dtype, count, input2, buf.Download(), absl::StrCat(what, " in place"));
        EXPECT_TRUE(buf.GuardsIntact()) << "written outside the buffer";
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, NvlinkAllReduceTest,
                         ::testing::Values(DType::kF32, DType::kF16, DType::kBF16),
                         [](const ::testing::TestParamInfo<DType>& info) {
                           return std::string(DTypeName(info.param));
                         });

TEST(NvlinkCommunicatorTest, AllRanksTookTheSameDecision) {
  const NvlinkSetup& setup = NvlinkTestEnvironment::setup();
  int32_t mine[3] = {setup.one_shot ? 1 : 0, static_cast<int32_t>(setup.capacity_bytes),
                     static_cast<int32_t>(setup.push_capacity_bytes)};
  std::vector<int32_t> all(3 * World().size());
  ASSERT_TRUE(World().AllGather(mine, all.data(), 3, DType::kI32).ok());
  for (int r = 0; r < World().size(); ++r) {
    EXPECT_EQ(all[3 * r], mine[0]) << "rank " << r;
    EXPECT_EQ(all[3 * r + 1], mine[1]) << "rank " << r;
    EXPECT_EQ(all[3 * r + 2], mine[2]) << "rank " << r;
  }
  if (setup.one_shot) {
    EXPECT_EQ(setup.capacity_bytes, size_t{1} << 20);
    EXPECT_EQ(setup.push_capacity_bytes, size_t{512} << 10);
    EXPECT_TRUE(Comm().CapturableInGraph());
  } else {
    EXPECT_FALSE(setup.reason.empty());
  }
}

// Many calls in a row without a Synchronize in between: epochs advance, staging parities are
// reused with different chunk bounds (sizes and dtypes change every call), and NCCL calls above
// the capacity are interleaved on the same stream.
TEST(NvlinkCommunicatorTest, ConsecutiveCallsWithDifferentSizes) {
  DeviceCommunicator& comm = Comm();
  const DType dtypes[] = {DType::kBF16, DType::kF32, DType::kF16};
  for (int round = 0; round < 3; ++round) {
    constexpr int kCalls = 48;
    std::vector<std::unique_ptr<DeviceBuffer>> bufs;
    std::vector<std::vector<uint8_t>> inputs;
    std::vector<DType> types;
    std::vector<size_t> counts;
    for (int k = 0; k < kCalls; ++k) {
      const DType dtype = dtypes[k % 3];
      const size_t cap = CapacityElements(dtype);
      // Tiny, one row of 4096, 1 MiB (64 rows of 8192 in bf16), growing odd sizes, capacity, above.
      const size_t choices[] = {1,   4096,    8192 * 128 / DTypeSize(dtype), size_t{4099} * (k + 1),
                                cap, cap + 17};
      const size_t count = choices[(k * 7 + round) % 6];
      types.push_back(dtype);
      counts.push_back(count);
      inputs.push_back(RandomInput(dtype, count, 5000000 + round * 1000 + k));
      bufs.push_back(std::make_unique<DeviceBuffer>(dtype, count));
      bufs.back()->Upload(inputs.back());
    }
    for (int k = 0; k < kCalls; ++k) {
      ASSERT_TRUE(comm.AllReduceSum(bufs[k]->get(), counts[k], types[k]).ok());
    }
    ASSERT_TRUE(comm.Synchronize().ok());
    for (int k = 0; k < kCalls; ++k) {
      ExpectReduced(types[k], counts[k], inputs[k], bufs[k]->Download(),
                    absl::StrCat("round ", round, " call ", k, " ", Name(types[k], counts[k])));
      EXPECT_TRUE(bufs[k]->GuardsIntact()) << "call " << k;
    }
  }
}

// Captured once into a CUDA graph and replayed with new data written into the same buffers
// between replays (outputs poisoned), with eager calls in between (the epochs are shared).
TEST(NvlinkCommunicatorTest, CudaGraphReplaysWithNewData) {
  if (!OneShot()) GTEST_SKIP() << "one-shot path off: " << NvlinkTestEnvironment::setup().reason;
  DeviceCommunicator& comm = Comm();
  cudaStream_t stream = NvlinkTestEnvironment::stream();
  struct Op {
    DType dtype;
    size_t count;
    bool in_place;
    size_t offset;
  };
  const std::vector<Op> ops = {{DType::kBF16, 4096 * 16, false, 0},
                               {DType::kF32, 4097, true, 0},
                               {DType::kF16, 7, false, 1},
                               {DType::kBF16, 8192 * 64, true, 0},
                               {DType::kBF16, 4096, false, 0}};
  std::vector<std::unique_ptr<DeviceBuffer>> ins, outs;
  for (const Op& op : ops) {
    ins.push_back(std::make_unique<DeviceBuffer>(op.dtype, op.count, op.offset));
    outs.push_back(op.in_place ? nullptr : std::make_unique<DeviceBuffer>(op.dtype, op.count, op.offset));
  }
  ASSERT_TRUE(comm.Synchronize().ok());
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  absl::Status captured = absl::OkStatus();
  for (size_t k = 0; k < ops.size() && captured.ok(); ++k) {
    void* out = ops[k].in_place ? ins[k]->get() : outs[k]->get();
    captured = AllReduceSumInto(comm, ins[k]->get(), out, ops[k].count, ops[k].dtype);
  }
  ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
  ASSERT_TRUE(captured.ok()) << captured;
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);

  for (int replay = 0; replay < 6; ++replay) {
    std::vector<std::vector<uint8_t>> inputs;
    for (size_t k = 0; k < ops.size(); ++k) {
      inputs.push_back(RandomInput(ops[k].dtype, ops[k].count, 9000000 + replay * 100 + k));
      ins[k]->Poison();
      ins[k]->Upload(inputs[k]);
      if (outs[k]) outs[k]->Poison();
    }
    ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
    ASSERT_TRUE(comm.Synchronize().ok());
    for (size_t k = 0; k < ops.size(); ++k) {
      const DeviceBuffer& result = ops[k].in_place ? *ins[k] : *outs[k];
      ExpectReduced(ops[k].dtype, ops[k].count, inputs[k], result.Download(),
                    absl::StrCat("replay ", replay, " op ", k, " ", Name(ops[k].dtype, ops[k].count)));
      EXPECT_TRUE(result.GuardsIntact()) << "replay " << replay << " op " << k;
    }
    // An eager call between replays: it advances the same device-side epochs.
    const std::vector<uint8_t> eager_input = RandomInput(DType::kBF16, 999, 9500000 + replay);
    DeviceBuffer eager(DType::kBF16, 999);
    eager.Upload(eager_input);
    ASSERT_TRUE(comm.AllReduceSum(eager.get(), 999, DType::kBF16).ok());
    ASSERT_TRUE(comm.Synchronize().ok());
    ExpectReduced(DType::kBF16, 999, eager_input, eager.Download(),
                  absl::StrCat("eager after replay ", replay));
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
}

TEST(NvlinkCommunicatorTest, IntegerAllReduceAndOtherOpsGoToNccl) {
  DeviceCommunicator& comm = Comm();
  const size_t count = 1000;
  DeviceBuffer ints(DType::kI32, count);
  ints.Upload(Encode(DType::kI32, std::vector<double>(count, comm.rank() + 1.0)));
  ASSERT_TRUE(comm.AllReduceSum(ints.get(), count, DType::kI32).ok());
  DeviceBuffer gathered(DType::kF32, count * comm.size());
  DeviceBuffer mine(DType::kF32, count);
  mine.Upload(Encode(DType::kF32, std::vector<double>(count, comm.rank() * 10.0)));
  ASSERT_TRUE(comm.AllGather(mine.get(), gathered.get(), count, DType::kF32).ok());
  ASSERT_TRUE(comm.Synchronize().ok());
  const double want = comm.size() * (comm.size() + 1) / 2.0;
  for (double v : Decode(DType::kI32, ints.Download())) ASSERT_EQ(v, want);
  const std::vector<double> all = Decode(DType::kF32, gathered.Download());
  for (int r = 0; r < comm.size(); ++r) EXPECT_EQ(all[r * count + count - 1], r * 10.0);
  EXPECT_EQ(comm.AllReduceSum(ints.get(), 1, DType::kU8).code(), absl::StatusCode::kInvalidArgument);
}

// One rank's LLM_CUSTOM_ALLREDUCE=0 turns the one-shot path off on every rank.
TEST(NvlinkCommunicatorTest, EnvironmentOnOneRankDisablesEverywhere) {
  MpiCommunicator& world = World();
  if (world.rank() == world.size() - 1) setenv("LLM_CUSTOM_ALLREDUCE", "0", 1);
  NvlinkSetup setup;
  auto comm = MakeNvlink(world, NvlinkTestEnvironment::stream(), NvlinkTestEnvironment::device(),
                         NvlinkOptions{}, &setup);
  unsetenv("LLM_CUSTOM_ALLREDUCE");
  ASSERT_TRUE(comm.ok()) << comm.status();
  EXPECT_FALSE(setup.one_shot);
  EXPECT_THAT(setup.reason, HasSubstr("LLM_CUSTOM_ALLREDUCE=0"));
  const std::vector<uint8_t> input = RandomInput(DType::kBF16, 4096, 77);
  DeviceBuffer buf(DType::kBF16, 4096);
  buf.Upload(input);
  ASSERT_TRUE((*comm)->AllReduceSum(buf.get(), 4096, DType::kBF16).ok());
  ASSERT_TRUE((*comm)->Synchronize().ok());
  ExpectReduced(DType::kBF16, 4096, input, buf.Download(), "NCCL after LLM_CUSTOM_ALLREDUCE=0",
                /*nccl=*/true);
}

TEST(NvlinkCommunicatorTest, SingleRankGroupKeepsNccl) {
  MpiCommunicator& world = World();
  auto solo = world.Split(/*color=*/world.rank(), /*key=*/0, "solo");
  ASSERT_TRUE(solo.ok()) << solo.status();
  NvlinkSetup setup;
  auto comm = MakeNvlink(**solo, NvlinkTestEnvironment::stream(), NvlinkTestEnvironment::device(),
                         NvlinkOptions{}, &setup);
  ASSERT_TRUE(comm.ok()) << comm.status();
  EXPECT_FALSE(setup.one_shot);
  EXPECT_THAT(setup.reason, HasSubstr("world size 1"));
  comm->reset();
}

TEST(NvlinkCommunicatorTest, OptionsThatDifferBetweenRanksAreRejectedEverywhere) {
  MpiCommunicator& world = World();
  NvlinkOptions options;
  options.blocks = world.rank() == 0 ? 32 : 16;
  auto comm =
      MakeNvlink(world, NvlinkTestEnvironment::stream(), NvlinkTestEnvironment::device(), options, nullptr);
  EXPECT_EQ(comm.status().code(), absl::StatusCode::kInvalidArgument) << comm.status();

  options.blocks = 32;
  options.push_capacity_bytes = world.rank() == 0 ? size_t{512} << 10 : size_t{256} << 10;
  comm =
      MakeNvlink(world, NvlinkTestEnvironment::stream(), NvlinkTestEnvironment::device(), options, nullptr);
  EXPECT_EQ(comm.status().code(), absl::StatusCode::kInvalidArgument) << comm.status();
  options.push_capacity_bytes = NvlinkOptions{}.push_capacity_bytes;

  options.blocks = 1000;  // malformed on every rank
  comm =
      MakeNvlink(world, NvlinkTestEnvironment::stream(), NvlinkTestEnvironment::device(), options, nullptr);
  EXPECT_EQ(comm.status().code(), absl::StatusCode::kInvalidArgument) << comm.status();
  EXPECT_THAT(std::string(comm.status().message()), HasSubstr("blocks"));
}

// A capacity that is not a multiple of 16 * blocks and an odd block count: the capacity is rounded
// down, and sizes around it still reduce correctly (one-shot below, NCCL above).
TEST(NvlinkCommunicatorTest, OddLayoutAroundItsCapacity) {
  NvlinkSetup setup;
  auto made = MakeNvlink(World(), NvlinkTestEnvironment::stream(), NvlinkTestEnvironment::device(),
                         NvlinkOptions{.capacity_bytes = 100000, .blocks = 7}, &setup);
  ASSERT_TRUE(made.ok()) << made.status();
  if (!setup.one_shot) GTEST_SKIP() << setup.reason;
  EXPECT_EQ(setup.capacity_bytes, size_t{100000} / 7 / 16 * 16 * 7);
  DeviceCommunicator& comm = **made;
  const size_t cap = setup.capacity_bytes / 2;
  for (size_t count : {size_t{1}, size_t{13}, cap - 9, cap - 1, cap}) {
    const std::vector<uint8_t> input = RandomInput(DType::kBF16, count, 31000 + count);
    DeviceBuffer in(DType::kBF16, count), out(DType::kBF16, count);
    in.Upload(input);
    ASSERT_TRUE(AllReduceSumInto(comm, in.get(), out.get(), count, DType::kBF16).ok());
    ASSERT_TRUE(comm.Synchronize().ok());
    ExpectReduced(DType::kBF16, count, input, out.Download(), absl::StrCat("odd layout ", count));
    EXPECT_TRUE(out.GuardsIntact()) << count;
  }
}

// --- the fused all-reduce + residual add + RMSNorm ---

// `count` values uniform in [low, high] rounded into `dtype`, the same on every rank (the residual
// stream and the norm weight are replicated across tensor-parallel ranks).
std::vector<uint8_t> SharedRandom(DType dtype, size_t count, uint64_t seed, double low, double high) {
  std::mt19937_64 rng(seed * 2654435761u + 99u);
  std::uniform_real_distribution<double> dist(low, high);
  std::vector<double> values(count);
  for (double& v : values) v = dist(rng);
  return Encode(dtype, values);
}

// Rounds a float into `dtype` on the host, as the kernels' FromFloat does (round to nearest even).
double RoundTo(DType dtype, float f) { return Decode(dtype, Encode(dtype, {static_cast<double>(f)}))[0]; }

struct FusedCase {
  size_t rows, dim;
  size_t offset;  // elements: 1 makes every buffer misaligned (the kernel's scalar path)
};

// One fused call checked against a host reference built from every rank's delta: the delta sum in
// float32 in rank order rounded into `dtype` (what the one-shot all-reduce produces), added to the
// residual in float32 and rounded (bit-exact expectations), then the norm in float64 (the kernel's
// sum of squares runs in another order: within a few units of the dtype's rounding).
void CheckFused(DType dtype, const FusedCase& c, const std::vector<uint8_t>& delta_in,
                const std::vector<uint8_t>& residual_in, const std::vector<uint8_t>& weight_in,
                const DeviceBuffer& residual, const DeviceBuffer& out, float eps, const std::string& what) {
  MpiCommunicator& world = World();
  const size_t bytes = delta_in.size();
  std::vector<uint8_t> deltas(bytes * world.size());
  ASSERT_TRUE(world.AllGather(delta_in.data(), deltas.data(), bytes, DType::kU8).ok());
  std::vector<std::vector<double>> per_rank(world.size());
  for (int r = 0; r < world.size(); ++r)
    per_rank[r] =
        Decode(dtype, std::vector<uint8_t>(deltas.begin() + r * bytes, deltas.begin() + (r + 1) * bytes));
  const std::vector<double> res0 = Decode(dtype, residual_in), w = Decode(dtype, weight_in);
  const std::vector<uint8_t> got_res_bytes = residual.Download(), got_out_bytes = out.Download();
  const std::vector<double> got_res = Decode(dtype, got_res_bytes), got_out = Decode(dtype, got_out_bytes);
  const double unit = dtype == DType::kF32   ? std::ldexp(1.0, -24)
                      : dtype == DType::kF16 ? std::ldexp(1.0, -11)
                                             : std::ldexp(1.0, -8);
  int bad = 0;
  for (size_t row = 0; row < c.rows && bad < 5; ++row) {
    std::vector<double> x(c.dim);
    double sum_sq = 0;
    for (size_t j = 0; j < c.dim; ++j) {
      const size_t i = row * c.dim + j;
      float acc = static_cast<float>(per_rank[0][i]);
      for (int r = 1; r < world.size(); ++r) acc += static_cast<float>(per_rank[r][i]);
      x[j] = RoundTo(dtype, static_cast<float>(res0[i]) + static_cast<float>(RoundTo(dtype, acc)));
      sum_sq += x[j] * x[j];
      if (!(got_res[i] == x[j]) && bad < 5) {
        ++bad;
        ADD_FAILURE() << what << ": residual row " << row << " col " << j << ": got " << got_res[i]
                      << ", want " << x[j];
      }
    }
    const double inv = 1.0 / std::sqrt(sum_sq / static_cast<double>(c.dim) + eps);
    for (size_t j = 0; j < c.dim && bad < 5; ++j) {
      const double ref = w[j] * x[j] * inv;
      const double got = got_out[row * c.dim + j];
      if (!(std::abs(got - ref) <= 2 * unit * std::abs(ref) + 1e-5 * std::abs(w[j] * x[j] * inv) + 1e-6)) {
        ++bad;
        ADD_FAILURE() << what << ": normed row " << row << " col " << j << ": got " << got << ", want "
                      << ref;
      }
    }
  }
  // Every rank must hold the same residual and normed bits (they feed replicated computations).
  for (const std::vector<uint8_t>* mine : {&got_res_bytes, &got_out_bytes}) {
    std::vector<uint8_t> all(mine->size() * world.size());
    ASSERT_TRUE(world.AllGather(mine->data(), all.data(), mine->size(), DType::kU8).ok());
    for (int r = 0; r < world.size(); ++r)
      EXPECT_EQ(std::memcmp(all.data() + r * mine->size(), mine->data(), mine->size()), 0)
          << what << ": rank " << r << " differs";
  }
}

// Decode-sized row counts and hidden sizes, aligned and misaligned, every dtype; each fused call
// is followed by a plain one-shot all-reduce (the two share the epochs and staging slots), all
// enqueued before one Synchronize.
TEST(NvlinkCommunicatorTest, FusedAllReduceAddRmsNormMatchesReference) {
  if (!OneShot()) {
    EXPECT_FALSE(Comm().CanAllReduceAddRmsNorm(64, 4096, DType::kBF16));
    GTEST_SKIP() << "one-shot path off: " << NvlinkTestEnvironment::setup().reason;
  }
  // Once with the push kernel (up to 512 KiB; the f32 64 x 4096 case takes the one-shot kernel),
  // once with the one-shot kernel only, fused from one row up (the default starts at
  // fuse_min_rows), so every row count is checked on both.
  for (size_t push_capacity : {NvlinkOptions{}.push_capacity_bytes, size_t{0}}) {
    SCOPED_TRACE(absl::StrCat("push capacity ", push_capacity));
    NvlinkOptions options;
    options.fuse_min_rows = 1;
    options.push_capacity_bytes = push_capacity;
    options.push_fuse_add_rms_norm = true;
    NvlinkSetup setup;
    auto made = MakeNvlink(World(), NvlinkTestEnvironment::stream(), NvlinkTestEnvironment::device(), options,
                           &setup);
    ASSERT_TRUE(made.ok()) << made.status();
    ASSERT_EQ(setup.push_capacity_bytes, push_capacity);
    DeviceCommunicator& comm = **made;
    const float eps = 1e-5f;
    const FusedCase cases[] = {{1, 4096, 0}, {3, 4096, 0}, {16, 4096, 0}, {64, 4096, 0}, {1, 8192, 0},
                               {7, 5120, 0}, {2, 100, 0},  {5, 4096, 1},  {33, 896, 0},  {1, 8, 1}};
    for (DType dtype : {DType::kBF16, DType::kF16, DType::kF32}) {
      struct Call {
        FusedCase c;
        std::vector<uint8_t> delta, residual, weight, plain;
        std::unique_ptr<DeviceBuffer> d_delta, d_residual, d_weight, d_out, d_plain;
      };
      std::vector<Call> calls;
      uint64_t seed = 700000 + static_cast<uint64_t>(dtype) * 100;
      for (const FusedCase& c : cases) {
        const size_t count = c.rows * c.dim;
        ASSERT_TRUE(comm.CanAllReduceAddRmsNorm(c.rows, c.dim, dtype)) << c.rows << " x " << c.dim;
        Call call;
        call.c = c;
        call.delta = RandomInput(dtype, count, ++seed);
        call.residual = SharedRandom(dtype, count, ++seed, -4.0, 4.0);
        call.weight = SharedRandom(dtype, c.dim, ++seed, 0.5, 1.5);
        call.plain = RandomInput(dtype, 4096, ++seed);
        call.d_delta = std::make_unique<DeviceBuffer>(dtype, count, c.offset);
        call.d_residual = std::make_unique<DeviceBuffer>(dtype, count, c.offset);
        call.d_weight = std::make_unique<DeviceBuffer>(dtype, c.dim, c.offset);
        call.d_out = std::make_unique<DeviceBuffer>(dtype, count, c.offset);
        call.d_plain = std::make_unique<DeviceBuffer>(dtype, 4096);
        call.d_delta->Upload(call.delta);
        call.d_residual->Upload(call.residual);
        call.d_weight->Upload(call.weight);
        call.d_plain->Upload(call.plain);
        calls.push_back(std::move(call));
      }
      for (Call& call : calls) {
        ASSERT_TRUE(comm.AllReduceAddRmsNorm(call.d_delta->get(), call.d_residual->get(),
                                             call.d_weight->get(), eps, call.d_out->get(), call.c.rows,
                                             call.c.dim, dtype)
                        .ok());
        ASSERT_TRUE(comm.AllReduceSum(call.d_plain->get(), 4096, dtype).ok());
      }
      ASSERT_TRUE(comm.Synchronize().ok());
      for (const Call& call : calls) {
        const std::string what = absl::StrCat(std::string(DTypeName(dtype)), " ", call.c.rows, " x ",
                                              call.c.dim, " offset ", call.c.offset);
        SCOPED_TRACE(what);
        CheckFused(dtype, call.c, call.delta, call.residual, call.weight, *call.d_residual, *call.d_out, eps,
                   what);
        EXPECT_EQ(call.d_delta->Download(), call.delta) << "delta changed";
        EXPECT_TRUE(call.d_residual->GuardsIntact() && call.d_out->GuardsIntact()) << "written outside";
        ExpectReduced(dtype, 4096, call.plain, call.d_plain->Download(), what + " then a plain all-reduce");
      }
    }
  }
}

// What does not fit one block's staging slot is refused (the caller then runs the unfused path),
// and the refusal is the same on every rank.
TEST(NvlinkCommunicatorTest, FusedAllReduceAddRmsNormRefusesWhatDoesNotFit) {
  DeviceCommunicator& comm = Comm();
  if (!OneShot()) GTEST_SKIP() << "one-shot path off: " << NvlinkTestEnvironment::setup().reason;
  // Default layout: the push kernel takes up to 512 KiB, not fused by default (the plain push
  // all-reduce then the norm kernel); above, the one-shot kernel's 32 blocks of 32 KiB from
  // fuse_min_rows (32) rows: bf16 rows of 8192 are 16 KiB, 2 rows per block, 64 rows.
  EXPECT_FALSE(comm.CanAllReduceAddRmsNorm(1, 4096, DType::kBF16));   // push
  EXPECT_FALSE(comm.CanAllReduceAddRmsNorm(31, 8192, DType::kBF16));  // push: 496 KiB
  EXPECT_TRUE(comm.CanAllReduceAddRmsNorm(64, 8192, DType::kBF16));   // one-shot
  EXPECT_FALSE(comm.CanAllReduceAddRmsNorm(65, 8192, DType::kBF16));
  EXPECT_FALSE(comm.CanAllReduceAddRmsNorm(2048, 4096, DType::kBF16));  // prefill: NCCL + AddRmsNorm
  EXPECT_FALSE(comm.CanAllReduceAddRmsNorm(1, 4096, DType::kI32));
  EXPECT_FALSE(comm.CanAllReduceAddRmsNorm(0, 4096, DType::kBF16));
  DeviceBuffer buf(DType::kBF16, 65 * 8192);
  const absl::Status refused =
      comm.AllReduceAddRmsNorm(buf.get(), buf.get(), buf.get(), 1e-5f, buf.get(), 65, 8192, DType::kBF16);
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument) << refused;

  // Without the push kernel, below fuse_min_rows the one-shot kernel's fused form is not offered
  // (the all-reduce then the norm kernel is as fast).
  NvlinkSetup setup;
  auto no_push = MakeNvlink(World(), NvlinkTestEnvironment::stream(), NvlinkTestEnvironment::device(),
                            NvlinkOptions{.push_capacity_bytes = 0}, &setup);
  ASSERT_TRUE(no_push.ok()) << no_push.status();
  EXPECT_EQ(setup.push_capacity_bytes, 0u);
  EXPECT_FALSE((*no_push)->CanAllReduceAddRmsNorm(31, 4096, DType::kBF16));
  EXPECT_TRUE((*no_push)->CanAllReduceAddRmsNorm(32, 4096, DType::kBF16));

  // With the push kernel's fused form on: every size it takes.
  auto push_fused = MakeNvlink(World(), NvlinkTestEnvironment::stream(), NvlinkTestEnvironment::device(),
                               NvlinkOptions{.push_fuse_add_rms_norm = true}, nullptr);
  ASSERT_TRUE(push_fused.ok()) << push_fused.status();
  EXPECT_TRUE((*push_fused)->CanAllReduceAddRmsNorm(1, 4096, DType::kBF16));
  EXPECT_TRUE((*push_fused)->CanAllReduceAddRmsNorm(31, 8192, DType::kBF16));
  EXPECT_TRUE((*push_fused)->CanAllReduceAddRmsNorm(64, 8192, DType::kBF16));
  EXPECT_FALSE((*push_fused)->CanAllReduceAddRmsNorm(65, 8192, DType::kBF16));
}

// Fusion turned off on one rank (its option) is off on every rank; the plain one-shot path stays.
TEST(NvlinkCommunicatorTest, FusedAllReduceAddRmsNormOffOnOneRankIsOffEverywhere) {
  EXPECT_EQ(NvlinkTestEnvironment::setup().fused_add_rms_norm, OneShot());
  MpiCommunicator& world = World();
  NvlinkOptions options;
  options.fuse_add_rms_norm = world.rank() != 0;
  NvlinkSetup setup;
  auto made =
      MakeNvlink(world, NvlinkTestEnvironment::stream(), NvlinkTestEnvironment::device(), options, &setup);
  ASSERT_TRUE(made.ok()) << made.status();
  EXPECT_FALSE(setup.fused_add_rms_norm);
  EXPECT_FALSE((*made)->CanAllReduceAddRmsNorm(64, 4096, DType::kBF16));
  EXPECT_EQ(setup.one_shot, OneShot());

  // The push kernel's fused form, asked for by one rank only: rejected on every rank.
  options.fuse_add_rms_norm = true;
  options.push_fuse_add_rms_norm = world.rank() == 0;
  made = MakeNvlink(world, NvlinkTestEnvironment::stream(), NvlinkTestEnvironment::device(), options, &setup);
  EXPECT_EQ(made.status().code(), absl::StatusCode::kInvalidArgument) << made.status();
}

// The push kernel tells arrived data from "nothing yet" by the all-ones pattern (a NaN in every
// float type): an input element with that pattern is sent as another NaN, so its sum is NaN and
// nothing waits forever; signed zeros sum as usual. Later calls through the same three phases of
// buffers (every phase used twice more) are unaffected.
TEST(NvlinkCommunicatorTest, PushKernelTakesAllOnesInputsAndSignedZeros) {
  if (!OneShot() || NvlinkTestEnvironment::setup().push_capacity_bytes == 0)
    GTEST_SKIP() << "push kernel off: " << NvlinkTestEnvironment::setup().reason;
  DeviceCommunicator& comm = Comm();
  for (DType dtype : {DType::kBF16, DType::kF16, DType::kF32}) {
    for (size_t offset : {size_t{0}, size_t{1}}) {
      SCOPED_TRACE(absl::StrCat(std::string(DTypeName(dtype)), " offset ", offset));
      const size_t count = 4096 + 8;
      const size_t elem = DTypeSize(dtype);
      std::vector<uint8_t> input = RandomInput(dtype, count, 424242 + static_cast<uint64_t>(dtype) + offset);
      const std::vector<size_t> nan_at = {0, 5, 17, 4095, count - 1};
      const std::vector<size_t> zero_at = {1, 2, 3, 100, 4096};
      // Rank 0 contributes the all-ones pattern; every rank contributes signed zeros, -0.0 on even
      // ranks.
      if (World().rank() == 0)
        for (size_t i : nan_at) std::memset(input.data() + i * elem, 0xff, elem);
      for (size_t i : zero_at) {
        std::memset(input.data() + i * elem, 0, elem);
        if (World().rank() % 2 == 0) input[i * elem + elem - 1] = 0x80;  // sign bit (little-endian)
      }
      DeviceBuffer in(dtype, count, offset), out(dtype, count, offset);
      in.Upload(input);
      ASSERT_TRUE(AllReduceSumInto(comm, in.get(), out.get(), count, dtype).ok());
      ASSERT_TRUE(comm.Synchronize().ok());
      const std::vector<double> got = Decode(dtype, out.Download());
      for (size_t i : nan_at) EXPECT_TRUE(std::isnan(got[i])) << "index " << i << ": " << got[i];
      for (size_t i : zero_at) EXPECT_EQ(got[i], 0.0) << "index " << i;
      // The rest against the float64 sum (NaN and zero positions replaced by zeros everywhere).
      std::vector<uint8_t> clean = input, clean_out = out.Download();
      for (size_t i : nan_at) {
        std::memset(clean.data() + i * elem, 0, elem);
        std::memset(clean_out.data() + i * elem, 0, elem);
      }
      ExpectReduced(dtype, count, clean, clean_out, "around all-ones inputs");
      for (int k = 0; k < 6; ++k) {
        const std::vector<uint8_t> next = RandomInput(dtype, count, 434343 + k);
        DeviceBuffer buf(dtype, count, offset);
        buf.Upload(next);
        ASSERT_TRUE(comm.AllReduceSum(buf.get(), count, dtype).ok());
        ASSERT_TRUE(comm.Synchronize().ok());
        ExpectReduced(dtype, count, next, buf.Download(), absl::StrCat("call ", k, " after all-ones inputs"));
      }
    }
  }
}

// One rank's LLM_PUSH_ALLREDUCE=0 turns the push kernel off on every rank (the one-shot kernel
// then takes every size up to its capacity).
TEST(NvlinkCommunicatorTest, PushKernelOffOnOneRankIsOffEverywhere) {
  if (!OneShot()) GTEST_SKIP() << "one-shot path off: " << NvlinkTestEnvironment::setup().reason;
  MpiCommunicator& world = World();
  if (world.rank() == 0) setenv("LLM_PUSH_ALLREDUCE", "0", 1);
  NvlinkSetup setup;
  auto made = MakeNvlink(world, NvlinkTestEnvironment::stream(), NvlinkTestEnvironment::device(),
                         NvlinkOptions{}, &setup);
  unsetenv("LLM_PUSH_ALLREDUCE");
  ASSERT_TRUE(made.ok()) << made.status();
  EXPECT_TRUE(setup.one_shot);
  EXPECT_EQ(setup.push_capacity_bytes, 0u);
  const std::vector<uint8_t> input = RandomInput(DType::kBF16, 4096, 4711);
  DeviceBuffer buf(DType::kBF16, 4096);
  buf.Upload(input);
  ASSERT_TRUE((*made)->AllReduceSum(buf.get(), 4096, DType::kBF16).ok());
  ASSERT_TRUE((*made)->Synchronize().ok());
  ExpectReduced(DType::kBF16, 4096, input, buf.Download(), "one-shot after LLM_PUSH_ALLREDUCE=0");
}

TEST(NvlinkCommunicatorTest, NvlinkMulticastStaysOff) {
  const char* nvls = std::getenv("NCCL_NVLS_ENABLE");
  ASSERT_NE(nvls, nullptr);
  EXPECT_STREQ(nvls, "0");
}

}  // namespace
}  // namespace llm
