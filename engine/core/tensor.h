// Tensor: a non-owning, contiguous, row-major view (pointer, dtype, shape, device).
// Buffer: the owning side; frees its memory through the deleter of whoever allocated it.
// Kernels never see either type: launchers unpack a Tensor into plain pointers and sizes.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <string>
#include <utility>

#include "kernels/core/dtype.h"
#include "kernels/core/status.h"

namespace llm {

enum class DeviceKind : uint8_t { kCpu, kCuda };

struct Device {
  DeviceKind kind = DeviceKind::kCpu;
  int index = 0;
  bool operator==(const Device&) const = default;
};

class Shape {
 public:
  static constexpr int kMaxRank = 4;
  Shape() = default;
  Shape(std::initializer_list<int64_t> dims) {
    LLM_CHECK(dims.size() <= kMaxRank);
    for (int64_t d : dims) dims_[rank_++] = d;
  }
  int rank() const { return rank_; }
  int64_t operator[](int i) const { return dims_[i]; }
  int64_t& operator[](int i) { return dims_[i]; }
  int64_t numel() const {
    int64_t n = 1;
    for (int i = 0; i < rank_; ++i) n *= dims_[i];
    return n;
  }
  bool operator==(const Shape& o) const {
    if (rank_ != o.rank_) return false;
    for (int i = 0; i < rank_; ++i)
      if (dims_[i] != o.dims_[i]) return false;
    return true;
  }
  std::string ToString() const;

 private:
  std::array<int64_t, kMaxRank> dims_{};
  int rank_ = 0;
};

class Tensor {
 public:
  Tensor() = default;
  Tensor(void* data, DType dtype, Shape shape, Device device = {})
      : data_(data), dtype_(dtype), shape_(shape), device_(device) {}

  bool empty() const { return data_ == nullptr; }
  void* data() const { return data_; }
  template <typename T>
  T* data_as() const { return static_cast<T*>(data_); }
  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  int rank() const { return shape_.rank(); }
  int64_t dim(int i) const { return shape_[i]; }
  int64_t numel() const { return shape_.numel(); }
  size_t bytes() const { return static_cast<size_t>(numel()) * DTypeSize(dtype_); }
  Device device() const { return device_; }

  // Rows [begin, end) along dimension 0.
  Tensor Rows(int64_t begin, int64_t end) const;
  // Same memory, another shape of equal element count.
  Tensor Reshape(Shape shape) const;

 private:
  void* data_ = nullptr;
  DType dtype_ = DType::kF32;
  Shape shape_;
  Device device_;
};

class Buffer {
 public:
  using Deleter = std::function<void(void*)>;
  Buffer() = default;
  Buffer(void* data, size_t bytes, Device device, Deleter deleter)
      : data_(data), bytes_(bytes), device_(device), deleter_(std::move(deleter)) {}
  ~Buffer() { Reset(); }
  Buffer(Buffer&& o) noexcept { *this = std::move(o); }
  Buffer& operator=(Buffer&& o) noexcept {
    if (this != &o) {
      Reset();
      data_ = std::exchange(o.data_, nullptr);
      bytes_ = std::exchange(o.bytes_, 0);
      device_ = o.device_;
      deleter_ = std::move(o.deleter_);
    }
    return *this;
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  Device device() const { return device_; }
  // A view of the first shape.numel() elements at byte `offset`; checks the bounds.
  Tensor View(DType dtype, Shape shape, size_t offset = 0) const;

 private:
  void Reset() {
    if (data_ && deleter_) deleter_(data_);
    data_ = nullptr;
  }
  void* data_ = nullptr;
  size_t bytes_ = 0;
  Device device_;
  Deleter deleter_;
};

// Host memory, 256-byte aligned (as device allocations are).
Buffer AllocateHost(size_t bytes);

// Carves consecutive, aligned views out of one Buffer: the start-up arena for weights,
// KV cache and activations, so that nothing is allocated once serving starts.
class Arena {
 public:
  explicit Arena(Buffer buffer) : buffer_(std::move(buffer)) {}
  absl::StatusOr<Tensor> Take(DType dtype, Shape shape, size_t alignment = 256);
  size_t used() const { return used_; }
  size_t capacity() const { return buffer_.bytes(); }
  // Hands back the underlying buffer (views taken so far stay valid while it lives).
  Buffer Release() && { return std::move(buffer_); }

 private:
  Buffer buffer_;
  size_t used_ = 0;
};

}  // namespace llm
