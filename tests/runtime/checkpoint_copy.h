// A fixture checkpoint read into memory, edited, and written back (single file or sharded with an
// index) with the project's safetensors writer (tests/model/test_files.h): sharded and malformed
// variants of the FP8 and int4 fixtures are built by the tests themselves, from the fixtures; and
// the loader's call on such a folder (LoadCheckpointWeights, EditedCheckpointTest).
#pragma once

#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine/backend/cpu/cpu_backend.h"
#include "engine/model/checkpoint.h"
#include "engine/model/config.h"
#include "engine/model/json_reader.h"
#include "engine/model/weights.h"
#include "gtest/gtest.h"
#include "tests/model/test_files.h"
#include "tests/runtime/fixture_reference.h"

namespace llm::testing {

inline std::string SafetensorsDTypeName(DType t) {
  switch (t) {
    case DType::kF32: return "F32";
    case DType::kF16: return "F16";
    case DType::kBF16: return "BF16";
    case DType::kI32: return "I32";
    case DType::kI64: return "I64";
    case DType::kU8: return "U8";
    case DType::kF8E4M3: return "F8_E4M3";
    case DType::kU4: break;  // never a tensor's dtype
  }
  return "?";
}

struct CheckpointCopy {
  nlohmann::json config;
  std::map<std::string, test_util::TensorSpec> tensors;  // by name
  std::map<std::string, std::string> extra_files;        // generation_config.json, hf_quant_config.json

  static CheckpointCopy Read(const std::filesystem::path& dir) {
    CheckpointCopy c;
    auto config = ReadTextFile(dir / "config.json");
    EXPECT_TRUE(config.ok()) << config.status();
    c.config = nlohmann::json::parse(*config);
    for (const char* extra : {"generation_config.json", "hf_quant_config.json"}) {
      if (auto text = ReadTextFile(dir / extra); text.ok()) c.extra_files[extra] = *text;
    }
    auto ckpt = Checkpoint::Open(dir);
    EXPECT_TRUE(ckpt.ok()) << ckpt.status();
    for (const std::string& name : (*ckpt)->TensorNames()) {
      const TensorRecord* r = *(*ckpt)->Find(name);
      c.tensors[name] = {name, SafetensorsDTypeName(r->dtype), r->shape,
                         std::string(static_cast<const char*>(r->data), r->bytes)};
    }
    return c;
  }

  // Writes config.json, the extra files and the tensors: one model.safetensors, or `shards`
  // files (tensors dealt round-robin, so fused parts and their scales land in different files)
  // with model.safetensors.index.json.
  void Write(const std::filesystem::path& dir, int shards = 1) const {
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    test_util::WriteFile(dir / "config.json", config.dump(2));
    for (const auto& [name, text] : extra_files) test_util::WriteFile(dir / name, text);
    std::vector<std::vector<test_util::TensorSpec>> files(std::max(shards, 1));
    int i = 0;
    for (const auto& [name, spec] : tensors) files[i++ % files.size()].push_back(spec);
    if (shards <= 1) {
      test_util::WriteFile(dir / "model.safetensors", test_util::BuildSafetensors(files[0]));
      return;
    }
    nlohmann::json index = {{"metadata", nlohmann::json::object()}, {"weight_map", nlohmann::json::object()}};
    for (int s = 0; s < shards; ++s) {
      const std::string file = absl::StrFormat("model-%05d-of-%05d.safetensors", s + 1, shards);
      test_util::WriteFile(dir / file, test_util::BuildSafetensors(files[s]));
      for (const test_util::TensorSpec& t : files[s]) index["weight_map"][t.name] = file;
    }
    test_util::WriteFile(dir / "model.safetensors.index.json", index.dump(2));
  }
};

// The weights of the checkpoint in `dir` as the engine loads them (its config, then its tensors).
inline absl::StatusOr<std::unique_ptr<ModelWeights>> LoadCheckpointWeights(const std::filesystem::path& dir,
                                                                           Backend& backend,
                                                                           ShardSpec shard = {},
                                                                           LoadOptions options = {}) {
  auto config = LoadModelConfig(dir);
  if (!config.ok()) return config.status();
  auto checkpoint = Checkpoint::Open(dir);
  if (!checkpoint.ok()) return checkpoint.status();
  return LoadWeights(*config, **checkpoint, shard, backend, options);
}

// Malformed and unsupported variants of a fixture: LoadEdited copies the fixture, applies `edit`
// and returns what loading the copy on the CPU says.
class EditedCheckpointTest : public ::testing::Test {
 protected:
  absl::Status LoadEdited(const char* fixture, const std::function<void(CheckpointCopy&)>& edit) {
    CheckpointCopy copy = CheckpointCopy::Read(ModelDir(fixture));
    edit(copy);
    copy.Write(dir_.path());
    CpuBackend cpu(2);
    return LoadCheckpointWeights(dir_.path(), cpu).status();
  }
  test_util::TempDir dir_;
};

}  // namespace llm::testing
