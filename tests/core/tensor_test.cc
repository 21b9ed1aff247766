#include "engine/core/tensor.h"

#include "gtest/gtest.h"

namespace llm {
namespace {

TEST(TensorTest, RowsAndReshapeShareMemory) {
  Buffer buf = AllocateHost(6 * 4 * sizeof(float));
  Tensor t = buf.View(DType::kF32, {6, 4});
  EXPECT_EQ(t.numel(), 24);
  Tensor rows = t.Rows(2, 5);
  EXPECT_EQ(rows.shape(), Shape({3, 4}));
  EXPECT_EQ(rows.data_as<float>(), t.data_as<float>() + 8);
  EXPECT_EQ(t.Reshape({2, 3, 4}).dim(1), 3);
}

TEST(TensorTest, ArenaAlignsAndRefusesOverflow) {
  Arena arena(AllocateHost(1024));
  auto a = arena.Take(DType::kF32, {10});
  ASSERT_TRUE(a.ok());
  auto b = arena.Take(DType::kF32, {10});
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b->data()) % 256, 0u);
  auto c = arena.Take(DType::kF32, {1000});
  EXPECT_EQ(c.status().code(), absl::StatusCode::kResourceExhausted);
}

}  // namespace
}  // namespace llm
