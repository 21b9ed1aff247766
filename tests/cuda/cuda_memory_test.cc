// The CUDA backend's device arena: one reservation sized by memory_fraction, FreeMemory() as what
// it has left (which the KV cache is sized from), buffers that give their range back, and a model
// that does not fit failing with a message that names the arena and what to change.
#include <cuda_runtime_api.h>

#include <cmath>
#include <string>
#include <vector>

#include "engine/runtime/model_runner.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/runtime/fixture_reference.h"

namespace llm {
namespace {

constexpr size_t kMiB = size_t{1} << 20;

size_t DeviceTotal() {
  size_t free_b = 0, total_b = 0;
  EXPECT_EQ(cudaMemGetInfo(&free_b, &total_b), cudaSuccess);
  return total_b;
}

void ExpectContains(const absl::Status& status, const std::string& text) {
  EXPECT_NE(std::string(status.message()).find(text), std::string::npos)
      << "no '" << text << "' in: " << status;
}

TEST(CudaArenaTest, RejectsAFractionOutsideTheUnitInterval) {
  for (double f : {0.0, -0.5, 1.01, std::nan("")}) {
    CudaBackendOptions o;
    o.memory_fraction = f;
    auto b = CudaBackend::Create(o);
    ASSERT_FALSE(b.ok()) << f;
    EXPECT_EQ(b.status().code(), absl::StatusCode::kInvalidArgument);
    ExpectContains(b.status(), "--gpu-memory-fraction");
  }
}

TEST(CudaArenaTest, FreeMemoryShrinksAsBuffersAreCarvedAndGrowsBackWhenFreed) {
  CudaBackendOptions o;
  o.memory_fraction = 0.05;
  std::unique_ptr<CudaBackend> b = testing::MakeCuda(DType::kF32, o);
  ASSERT_NE(b, nullptr);
  const DeviceArenaStats s0 = b->memory_stats();
  EXPECT_GT(s0.reserved, 0u);
  EXPECT_LE(s0.reserved, static_cast<size_t>(0.05 * DeviceTotal()));
  EXPECT_EQ(s0.in_use, o.gemm_workspace_bytes + o.attention_workspace_bytes);  // both are 256-byte multiples
  auto f0 = b->FreeMemory();
  ASSERT_TRUE(f0.ok()) << f0.status();
  EXPECT_EQ(*f0, s0.largest_free);
  EXPECT_EQ(*f0, s0.reserved - s0.in_use);  // one free block behind the workspaces

  absl::StatusOr<Buffer> a = b->Allocate(64 * kMiB);
  ASSERT_TRUE(a.ok()) << a.status();
  absl::StatusOr<Buffer> c = b->Allocate(32 * kMiB + 1);  // takes 32 MiB + 256
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(reinterpret_cast<uintptr_t>(c->data()) % 256, 0u);
  EXPECT_EQ(*b->FreeMemory(), *f0 - 96 * kMiB - 256);

  // The carved memory is real device memory: a round trip through it.
  std::vector<int32_t> host(1024), back(1024);
  for (int i = 0; i < 1024; ++i) host[i] = i * 7 - 3;
  const Tensor t = c->View(DType::kI32, {1024}, 32 * kMiB - 4096);
  ASSERT_TRUE(b->CopyToDevice(t, host.data()).ok());
  ASSERT_TRUE(b->CopyToHost(back.data(), t).ok());
  ASSERT_TRUE(b->Synchronize().ok());
  EXPECT_EQ(back, host);

  *c = Buffer();  // next to the free tail: merges with it
  EXPECT_EQ(*b->FreeMemory(), *f0 - 64 * kMiB);
  *a = Buffer();  // merges with the tail too: back to one block
  EXPECT_EQ(*b->FreeMemory(), *f0);
  const DeviceArenaStats s1 = b->memory_stats();
  EXPECT_EQ(s1.in_use, s0.in_use);
  EXPECT_EQ(s1.peak_in_use, s0.in_use + 96 * kMiB + 256);

  // More than the arena has left: the message names the arena and the flags that make room.
  absl::StatusOr<Buffer> too_big = b->Allocate(*f0 + 1);
  ASSERT_EQ(too_big.status().code(), absl::StatusCode::kResourceExhausted);
  ExpectContains(too_big.status(), "arena");
  ExpectContains(too_big.status(), "cuda:0");
  ExpectContains(too_big.status(), "--gpu-memory-fraction");
  ExpectContains(too_big.status(), "--kv-cache-fraction");
}

TEST(CudaArenaTest, BuffersKeepTheArenaAliveAfterTheBackendIsGone) {
  CudaBackendOptions o;
  o.memory_fraction = 0.02;
  std::unique_ptr<CudaBackend> b = testing::MakeCuda(DType::kF32, o);
  ASSERT_NE(b, nullptr);
  absl::StatusOr<Buffer> a = b->Allocate(kMiB);
  ASSERT_TRUE(a.ok()) << a.status();
  b.reset();
  *a = Buffer();  // gives its range back to an arena only the buffer still held
}

TEST(CudaArenaTest, WorkspacesThatDoNotFitFailAtCreation) {
  CudaBackendOptions o;  // 64 MiB of workspaces by default
  o.memory_fraction = static_cast<double>(16 * kMiB) / static_cast<double>(DeviceTotal());
  auto b = CudaBackend::Create(o);
  ASSERT_EQ(b.status().code(), absl::StatusCode::kResourceExhausted) << b.status();
  ExpectContains(b.status(), "cuBLASLt workspace");
  ExpectContains(b.status(), "arena");
}

TEST(CudaArenaTest, AModelThatDoesNotFitFailsNamingTheArena) {
  const std::string dir = testing::ModelDir("llama-tiny");  // 3.2 MiB of float32 weights
  auto config = LoadModelConfig(dir);
  ASSERT_TRUE(config.ok()) << config.status();
  auto checkpoint = Checkpoint::Open(dir);
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
  CudaBackendOptions o;
  o.dtype = DType::kF32;
  o.gemm_workspace_bytes = kMiB;
  o.attention_workspace_bytes = kMiB;
  // A 4 MiB arena: the workspaces and less than 2 MiB more.
  o.memory_fraction = static_cast<double>(4 * kMiB) / static_cast<double>(DeviceTotal());
  auto backend = CudaBackend::Create(o);
  ASSERT_TRUE(backend.ok()) << backend.status();
  EXPECT_LE((*backend)->memory_stats().reserved, 4 * kMiB);
  ModelRunnerOptions options;
  options.limits.max_tokens = 64;
  options.limits.max_seqs = 4;
  options.max_context = 128;
  auto runner = ModelRunner::Create(*config, **checkpoint, std::move(*backend), nullptr, options);
  ASSERT_FALSE(runner.ok());
  EXPECT_EQ(runner.status().code(), absl::StatusCode::kResourceExhausted) << runner.status();
  ExpectContains(runner.status(), "arena");
  ExpectContains(runner.status(), "--gpu-memory-fraction");
  ExpectContains(runner.status(), "--tp");
}

}  // namespace
}  // namespace llm
