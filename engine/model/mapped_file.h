// MappedFile: a read-only, private memory mapping of a whole file, unmapped on destruction.
// Checkpoints are mapped rather than read so that only the pages a loader touches are paged in.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>

#include "absl/status/statusor.h"

namespace llm {

class MappedFile {
 public:
  // NotFound when the file does not exist; other failures name the file and the errno text.
  static absl::StatusOr<std::unique_ptr<MappedFile>> Open(const std::filesystem::path& path);

  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  // nullptr for an empty file (a zero-length mapping is not allowed).
  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::filesystem::path& path() const { return path_; }

 private:
  MappedFile(std::filesystem::path path, const uint8_t* data, size_t size)
      : path_(std::move(path)), data_(data), size_(size) {}

  std::filesystem::path path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace llm
