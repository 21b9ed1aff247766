#include "engine/model/checkpoint.h"

#include <map>
#include <set>
#include <system_error>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/model/json_reader.h"
#include "engine/model/mapped_file.h"
#include "engine/model/safetensors_header.h"
#include "engine/model/shard_index.h"
#include "kernels/core/status.h"

namespace llm {
namespace {

constexpr char kSingleFile[] = "model.safetensors";
constexpr char kIndexFile[] = "model.safetensors.index.json";

bool IsFloating(DType t) { return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16; }

std::string FormatShape(absl::Span<const int64_t> shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

bool FileExists(const std::filesystem::path& p) {
  std::error_code ec;
  return std::filesystem::exists(p, ec);
}

}  // namespace

int64_t TensorRecord::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string TensorRecord::ShapeString() const { return FormatShape(shape); }

struct Checkpoint::Impl {
  std::filesystem::path directory;
  // Every SafetensorsEntry's data points into one of these; they live as long as the Checkpoint.
  std::vector<std::unique_ptr<MappedFile>> files;
  // Ordered, with std::less<> so that lookups by string_view need no temporary string.
  std::map<std::string, SafetensorsEntry, std::less<>> tensors;

  // Maps and validates one file. The entries are returned, not added: a sharded checkpoint
  // takes only those its index names.
  absl::StatusOr<std::vector<SafetensorsEntry>> MapFile(const std::filesystem::path& path) {
    ASSIGN_OR_RETURN(std::unique_ptr<MappedFile> file, MappedFile::Open(path));
    ASSIGN_OR_RETURN(std::vector<SafetensorsEntry> entries,
                     ParseSafetensors(file->data(), file->size(), path.filename().string(), path.string()));
    files.push_back(std::move(file));
    return entries;
  }

  absl::Status AddFile(const std::filesystem::path& path) {
    ASSIGN_OR_RETURN(std::vector<SafetensorsEntry> entries, MapFile(path));
    for (SafetensorsEntry& e : entries) tensors.emplace(e.record.name, std::move(e));
    return absl::OkStatus();
  }

  // The index is authoritative: it decides which shard a name lives in, and each tensor it lists
  // must be there.
  absl::Status AddShards(const std::filesystem::path& index_path) {
    ASSIGN_OR_RETURN(std::string text, ReadTextFile(index_path));
    ASSIGN_OR_RETURN(auto weight_map, ParseShardIndex(text, index_path.string()));

    std::map<std::string, std::map<std::string, SafetensorsEntry, std::less<>>> shards;
    for (const auto& [tensor, shard] : weight_map) shards.try_emplace(shard);
    for (auto& [shard, contents] : shards) {  // each shard mapped once, however many tensors it has
      const std::filesystem::path shard_path = directory / shard;
      absl::StatusOr<std::vector<SafetensorsEntry>> entries = MapFile(shard_path);
      if (absl::IsNotFound(entries.status())) {
        return absl::NotFoundError(absl::StrCat("shard '", shard_path.string(), "' listed in '",
                                                index_path.string(), "' does not exist"));
      }
      RETURN_IF_ERROR(entries.status());
      for (SafetensorsEntry& e : *entries) contents.emplace(e.record.name, std::move(e));
    }

    for (const auto& [tensor, shard] : weight_map) {
      auto& contents = shards[shard];
      auto it = contents.find(tensor);
      if (it == contents.end()) {
        return absl::InvalidArgumentError(absl::StrCat("tensor '", tensor, "' listed in '", index_path.string(),
                                                       "' is missing from shard '",
                                                       (directory / shard).string(), "'"));
      }
      tensors.emplace(tensor, std::move(it->second));
    }
    return absl::OkStatus();
  }
};

Checkpoint::Checkpoint(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Checkpoint::~Checkpoint() = default;

absl::StatusOr<std::unique_ptr<Checkpoint>> Checkpoint::Open(const std::filesystem::path& dir) {
  std::error_code ec;
  if (!std::filesystem::exists(dir, ec)) {
    return absl::NotFoundError(absl::StrCat("checkpoint directory '", dir.string(), "' does not exist"));
  }
  if (!std::filesystem::is_directory(dir, ec)) {
    return absl::InvalidArgumentError(absl::StrCat("'", dir.string(),
                                                   "' is not a directory (OpenFile takes a single file)"));
  }
  auto impl = std::make_unique<Impl>();
  impl->directory = dir;
  // Prefer the index when both exist: a lone model.safetensors beside one is usually stale.
  const std::filesystem::path index = dir / kIndexFile;
  const std::filesystem::path single = dir / kSingleFile;
  if (FileExists(index)) {
    RETURN_IF_ERROR(impl->AddShards(index));
  } else if (FileExists(single)) {
    RETURN_IF_ERROR(impl->AddFile(single));
  } else {
    return absl::NotFoundError(absl::StrCat("no ", kSingleFile, " or ", kIndexFile, " in '", dir.string(),
                                            "'"));
  }
  return std::unique_ptr<Checkpoint>(new Checkpoint(std::move(impl)));
}

absl::StatusOr<std::unique_ptr<Checkpoint>> Checkpoint::OpenFile(const std::filesystem::path& file) {
  auto impl = std::make_unique<Impl>();
  impl->directory = file.parent_path();
  RETURN_IF_ERROR(impl->AddFile(file));
  return std::unique_ptr<Checkpoint>(new Checkpoint(std::move(impl)));
}

bool Checkpoint::Contains(std::string_view name) const { return impl_->tensors.count(name) > 0; }

absl::StatusOr<const TensorRecord*> Checkpoint::Find(std::string_view name) const {
  auto it = impl_->tensors.find(name);
  if (it == impl_->tensors.end()) {
    return absl::NotFoundError(absl::StrCat("tensor '", std::string(name), "' not found in checkpoint '",
                                            impl_->directory.string(), "'"));
  }
  RETURN_IF_ERROR(it->second.unsupported);
  return &it->second.record;
}

absl::StatusOr<const TensorRecord*> Checkpoint::FindFloat(std::string_view name,
                                                          absl::Span<const int64_t> shape) const {
  ASSIGN_OR_RETURN(const TensorRecord* r, Find(name));
  const std::string file = (impl_->directory / r->file).string();
  if (!IsFloating(r->dtype)) {
    return absl::InvalidArgumentError(absl::StrCat("tensor '", r->name, "' in file '", file, "' has dtype ",
                                                   std::string(DTypeName(r->dtype)),
                                                   ", expected float32, float16 or bfloat16"));
  }
  if (absl::Span<const int64_t>(r->shape) != shape) {
    return absl::InvalidArgumentError(absl::StrCat("tensor '", r->name, "' in file '", file, "' has shape ",
                                                   r->ShapeString(), ", expected ", FormatShape(shape)));
  }
  return r;
}

absl::StatusOr<const TensorRecord*> Checkpoint::FindFp8(std::string_view name,
                                                        absl::Span<const int64_t> shape) const {
  ASSIGN_OR_RETURN(const TensorRecord* r, Find(name));
  const std::string file = (impl_->directory / r->file).string();
  if (r->dtype != DType::kF8E4M3) {
    return absl::InvalidArgumentError(absl::StrCat("tensor '", r->name, "' in file '", file, "' has dtype ",
                                                   std::string(DTypeName(r->dtype)), ", expected F8_E4M3"));
  }
  if (absl::Span<const int64_t>(r->shape) != shape) {
    return absl::InvalidArgumentError(absl::StrCat("tensor '", r->name, "' in file '", file, "' has shape ",
                                                   r->ShapeString(), ", expected ", FormatShape(shape)));
  }
  return r;
}

absl::StatusOr<const TensorRecord*> Checkpoint::FindTyped(std::string_view name, absl::Span<const int64_t> shape,
                                                          DType dtype) const {
  ASSIGN_OR_RETURN(const TensorRecord* r, Find(name));
  const std::string file = (impl_->directory / r->file).string();
  if (r->dtype != dtype) {
    return absl::InvalidArgumentError(absl::StrCat("tensor '", r->name, "' in file '", file, "' has dtype ",
                                                   std::string(DTypeName(r->dtype)), ", expected ",
                                                   std::string(DTypeName(dtype))));
  }
  if (absl::Span<const int64_t>(r->shape) != shape) {
    return absl::InvalidArgumentError(absl::StrCat("tensor '", r->name, "' in file '", file, "' has shape ",
                                                   r->ShapeString(), ", expected ", FormatShape(shape)));
  }
  return r;
}

absl::StatusOr<const TensorRecord*> Checkpoint::FindScale(std::string_view name,
                                                          absl::Span<const int64_t> shape) const {
  ASSIGN_OR_RETURN(const TensorRecord* r, Find(name));
  const std::string file = (impl_->directory / r->file).string();
  if (!IsFloating(r->dtype)) {
    return absl::InvalidArgumentError(absl::StrCat("scale tensor '", r->name, "' in file '", file, "' has dtype ",
                                                   std::string(DTypeName(r->dtype)),
                                                   ", expected float32, float16 or bfloat16"));
  }
  auto squeeze = [](absl::Span<const int64_t> dims) {
    std::vector<int64_t> out;
    for (int64_t d : dims)
      if (d != 1) out.push_back(d);
    return out;
  };
  if (squeeze(r->shape) != squeeze(shape)) {
    return absl::InvalidArgumentError(absl::StrCat("scale tensor '", r->name, "' in file '", file, "' has shape ",
                                                   r->ShapeString(), ", expected ", FormatShape(shape)));
  }
  return r;
}

std::vector<std::string> Checkpoint::TensorNames() const {
  std::vector<std::string> names;
  names.reserve(impl_->tensors.size());
  for (const auto& [name, entry] : impl_->tensors) names.push_back(name);
  return names;
}

const std::filesystem::path& Checkpoint::directory() const { return impl_->directory; }

}  // namespace llm
