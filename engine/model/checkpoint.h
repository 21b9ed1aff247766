// Checkpoint: the tensors of a Hugging Face safetensors checkpoint, single file or sharded
// (model.safetensors.index.json), memory-mapped rather than read: a tensor's bytes are only touched
// when a loader converts or slices them, so a tensor-parallel rank pages in only its own shards.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "kernels/core/dtype.h"

namespace llm {

struct TensorRecord {
  std::string name;
  std::string file;  // the safetensors file it lives in (file name only)
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  const void* data = nullptr;  // inside the mapping; valid while the Checkpoint lives
  size_t bytes = 0;

  int64_t numel() const;
  std::string ShapeString() const;  // "[384, 128]"
};

class Checkpoint {
 public:
  // `dir` holds model.safetensors or model.safetensors.index.json (+ shards). Validates every
  // header (length, JSON, dtype names, offsets inside the file and matching shape x dtype size,
  // no overlap), so that later accesses cannot read outside a mapping.
  static absl::StatusOr<std::unique_ptr<Checkpoint>> Open(const std::filesystem::path& dir);
  // A single .safetensors file.
  static absl::StatusOr<std::unique_ptr<Checkpoint>> OpenFile(const std::filesystem::path& file);

  ~Checkpoint();
  Checkpoint(const Checkpoint&) = delete;
  Checkpoint& operator=(const Checkpoint&) = delete;

  bool Contains(std::string_view name) const;
  // NotFound naming the tensor and the checkpoint directory.
  absl::StatusOr<const TensorRecord*> Find(std::string_view name) const;
  // Find + checks: the shape equals `shape` and the dtype is floating (f32/f16/bf16); errors name
  // the tensor, its file, the expected and the actual shape/dtype.
  absl::StatusOr<const TensorRecord*> FindFloat(std::string_view name,
                                                absl::Span<const int64_t> shape) const;
  // Find + checks: F8_E4M3 of exactly `shape`.
  absl::StatusOr<const TensorRecord*> FindFp8(std::string_view name, absl::Span<const int64_t> shape) const;
  // Find + checks: `dtype` (an integer type: the packed words of 4-bit checkpoints) of exactly `shape`.
  absl::StatusOr<const TensorRecord*> FindTyped(std::string_view name, absl::Span<const int64_t> shape,
                                                DType dtype) const;
  // Find + checks for a scale tensor: floating, and `shape` once dimensions of size 1 are dropped
  // on both sides (checkpoints write a per-tensor scale as [] or [1], per-channel as [N] or [N, 1]).
  absl::StatusOr<const TensorRecord*> FindScale(std::string_view name, absl::Span<const int64_t> shape) const;
  std::vector<std::string> TensorNames() const;
  const std::filesystem::path& directory() const;

 private:
  struct Impl;
  explicit Checkpoint(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace llm
