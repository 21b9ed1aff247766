#include "engine/core/tensor.h"

#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace llm {

std::string Shape::ToString() const {
  std::string s = "[";
  for (int i = 0; i < rank_; ++i) absl::StrAppend(&s, i ? ", " : "", dims_[i]);
  return s + "]";
}

Tensor Tensor::Rows(int64_t begin, int64_t end) const {
  LLM_CHECK(rank() >= 1 && 0 <= begin && begin <= end && end <= dim(0));
  const int64_t row_elems = dim(0) == 0 ? 0 : numel() / dim(0);
  Shape s = shape_;
  s[0] = end - begin;
  return Tensor(static_cast<char*>(data_) + begin * row_elems * DTypeSize(dtype_), dtype_, s, device_);
}

Tensor Tensor::Reshape(Shape shape) const {
  LLM_CHECK(shape.numel() == numel());
  return Tensor(data_, dtype_, shape, device_);
}

Tensor Buffer::View(DType dtype, Shape shape, size_t offset) const {
  LLM_CHECK(offset + static_cast<size_t>(shape.numel()) * DTypeSize(dtype) <= bytes_);
  return Tensor(static_cast<char*>(data_) + offset, dtype, shape, device_);
}

Buffer AllocateHost(size_t bytes) {
  // 256 bytes, like cudaMalloc: arenas size themselves assuming an aligned base.
  const size_t rounded = (bytes + 255) / 256 * 256;
  void* p = rounded ? std::aligned_alloc(256, rounded) : nullptr;
  LLM_CHECK(rounded == 0 || p != nullptr);
  return Buffer(p, bytes, Device{}, [](void* q) { std::free(q); });
}

absl::StatusOr<Tensor> Arena::Take(DType dtype, Shape shape, size_t alignment) {
  // Align the address itself: the buffer's own alignment may be weaker than `alignment`.
  const uintptr_t base = reinterpret_cast<uintptr_t>(buffer_.data());
  const size_t start = static_cast<size_t>((base + used_ + alignment - 1) / alignment * alignment - base);
  const size_t bytes = static_cast<size_t>(shape.numel()) * DTypeSize(dtype);
  if (start + bytes > buffer_.bytes()) {
    return absl::ResourceExhaustedError(absl::StrCat("arena exhausted: need ", bytes, " bytes at offset ",
                                                     start, ", capacity ", buffer_.bytes()));
  }
  used_ = start + bytes;
  return buffer_.View(dtype, shape, start);
}

}  // namespace llm
