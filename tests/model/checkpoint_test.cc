#include "engine/model/checkpoint.h"

#include <cstring>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "engine/model/config.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/model/test_files.h"

namespace llm {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using test_util::BuildSafetensors;
using test_util::Bytes;
using test_util::SafetensorsBytes;
using test_util::TempDir;
using test_util::TensorSpec;
using test_util::WriteFile;

const std::filesystem::path kModels = std::filesystem::path(LLM_TEST_DATA_DIR) / "models";

struct ExpectedTensor {
  std::string name;
  std::vector<int64_t> shape;
};

// The tensors a Hugging Face checkpoint of this config holds, derived from the config alone: a
// checkpoint that opens and matches this list also cross-checks the config parser.
std::vector<ExpectedTensor> ExpectedTensors(const ModelConfig& c) {
  const int64_t h = c.hidden_size, i = c.intermediate_size, q = c.q_size(), kv = c.kv_size();
  std::vector<ExpectedTensor> out = {{"model.embed_tokens.weight", {c.vocab_size, h}},
                                     {"model.norm.weight", {h}}};
  if (!c.tie_word_embeddings) out.push_back({"lm_head.weight", {c.vocab_size, h}});
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const std::string p = absl::StrCat("model.layers.", l, ".");
    out.push_back({p + "input_layernorm.weight", {h}});
    out.push_back({p + "post_attention_layernorm.weight", {h}});
    out.push_back({p + "self_attn.q_proj.weight", {q, h}});
    out.push_back({p + "self_attn.k_proj.weight", {kv, h}});
    out.push_back({p + "self_attn.v_proj.weight", {kv, h}});
    out.push_back({p + "self_attn.o_proj.weight", {h, q}});
    out.push_back({p + "mlp.gate_proj.weight", {i, h}});
    out.push_back({p + "mlp.up_proj.weight", {i, h}});
    out.push_back({p + "mlp.down_proj.weight", {h, i}});
    if (c.qkv_bias) {
      out.push_back({p + "self_attn.q_proj.bias", {q}});
      out.push_back({p + "self_attn.k_proj.bias", {kv}});
      out.push_back({p + "self_attn.v_proj.bias", {kv}});
    }
    if (c.qk_norm) {
      out.push_back({p + "self_attn.q_norm.weight", {c.head_dim}});
      out.push_back({p + "self_attn.k_norm.weight", {c.head_dim}});
    }
  }
  return out;
}

// --- the fixtures ---

class CheckpointFixtureTest : public ::testing::TestWithParam<const char*> {};

TEST_P(CheckpointFixtureTest, EveryExpectedTensorHasItsShapeAndDtype) {
  const std::filesystem::path dir = kModels / GetParam();
  absl::StatusOr<ModelConfig> config = LoadModelConfig(dir);
  ASSERT_TRUE(config.ok()) << config.status();
  absl::StatusOr<std::unique_ptr<Checkpoint>> ckpt = Checkpoint::Open(dir);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  EXPECT_EQ((*ckpt)->directory(), dir);

  const std::vector<ExpectedTensor> expected = ExpectedTensors(*config);
  for (const ExpectedTensor& t : expected) {
    SCOPED_TRACE(t.name);
    EXPECT_TRUE((*ckpt)->Contains(t.name));
    absl::StatusOr<const TensorRecord*> r = (*ckpt)->FindFloat(t.name, t.shape);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ((*r)->name, t.name);
    EXPECT_EQ((*r)->dtype, config->stored_dtype);
    EXPECT_EQ((*r)->shape, t.shape);
    EXPECT_EQ((*r)->bytes, static_cast<size_t>((*r)->numel()) * DTypeSize((*r)->dtype));
    EXPECT_NE((*r)->data, nullptr);
    EXPECT_TRUE(std::filesystem::exists(dir / (*r)->file)) << (*r)->file;
  }
  EXPECT_EQ((*ckpt)->TensorNames().size(), expected.size());
}

INSTANTIATE_TEST_SUITE_P(Models, CheckpointFixtureTest,
                         ::testing::Values("llama-tiny", "llama3-tiny-bf16", "qwen2-tiny", "qwen3-tiny-fp16",
                                           "llama-tiny-sharded"));

TEST(CheckpointTest, ShardedFixtureSpansEighteenShards) {
  absl::StatusOr<std::unique_ptr<Checkpoint>> ckpt = Checkpoint::Open(kModels / "llama-tiny-sharded");
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  std::set<std::string> files;
  for (const std::string& name : (*ckpt)->TensorNames()) {
    absl::StatusOr<const TensorRecord*> r = (*ckpt)->Find(name);
    ASSERT_TRUE(r.ok()) << r.status();
    files.insert((*r)->file);
  }
  EXPECT_EQ(files.size(), 18u);
  EXPECT_EQ(files.count("model-00001-of-00018.safetensors"), 1u);
  EXPECT_EQ(files.count("model-00018-of-00018.safetensors"), 1u);
  absl::StatusOr<const TensorRecord*> head = (*ckpt)->Find("lm_head.weight");
  ASSERT_TRUE(head.ok());
  EXPECT_EQ((*head)->file, "model-00018-of-00018.safetensors");
}

// First bytes of a few tensors, read independently from the fixture files.
TEST(CheckpointTest, DataPointsAtTheTensorBytes) {
  struct Probe {
    const char* model;
    const char* tensor;
    std::vector<uint8_t> first_bytes;
  };
  const Probe probes[] = {
      {"llama-tiny", "model.norm.weight", {0x04, 0xac, 0x7f, 0x3f, 0x2a, 0x29, 0x71, 0x3f}},
      {"llama-tiny", "model.embed_tokens.weight", {0xf0, 0xde, 0x56, 0xbd, 0x82, 0x89, 0x9d, 0x3c}},
      {"llama-tiny-sharded", "lm_head.weight", {0x93, 0xce, 0x13, 0x3e, 0xb1, 0x2a, 0x0b, 0xbd}},
      {"llama3-tiny-bf16", "model.layers.3.mlp.down_proj.weight", {0x28, 0xbe, 0x33, 0x3c, 0x13, 0x3e, 0x07, 0xbd}},
      {"qwen3-tiny-fp16", "model.layers.0.self_attn.q_norm.weight", {0xcc, 0x3a, 0xac, 0x3a, 0xd3, 0x3b, 0x7a, 0x3c}},
  };
  for (const Probe& p : probes) {
    SCOPED_TRACE(absl::StrCat(p.model, " ", p.tensor));
    absl::StatusOr<std::unique_ptr<Checkpoint>> ckpt = Checkpoint::Open(kModels / p.model);
    ASSERT_TRUE(ckpt.ok()) << ckpt.status();
    absl::StatusOr<const TensorRecord*> r = (*ckpt)->Find(p.tensor);
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_GE((*r)->bytes, p.first_bytes.size());
    EXPECT_EQ(std::memcmp((*r)->data, p.first_bytes.data(), p.first_bytes.size()), 0);
  }
}

TEST(CheckpointTest, OpenFileReadsIntegerTensors) {
  const std::filesystem::path file = kModels / "llama-tiny" / "expected.safetensors";
  absl::StatusOr<std::unique_ptr<Checkpoint>> ckpt = Checkpoint::OpenFile(file);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  EXPECT_EQ((*ckpt)->directory(), kModels / "llama-tiny");
  absl::StatusOr<const TensorRecord*> r = (*ckpt)->Find("greedy_0");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)->dtype, DType::kI32);
  EXPECT_EQ((*r)->shape, std::vector<int64_t>{24});
  EXPECT_EQ((*r)->file, "expected.safetensors");

  absl::StatusOr<const TensorRecord*> f = (*ckpt)->FindFloat("greedy_0", std::vector<int64_t>{24});
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(f.status().ToString(),
              AllOf(HasSubstr("'greedy_0'"), HasSubstr("expected.safetensors"), HasSubstr("int32")));
}

TEST(CheckpointTest, FindFloatWrongShapeNamesBothShapes) {
  absl::StatusOr<std::unique_ptr<Checkpoint>> ckpt = Checkpoint::Open(kModels / "llama-tiny");
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  absl::StatusOr<const TensorRecord*> r =
      (*ckpt)->FindFloat("model.layers.0.self_attn.k_proj.weight", std::vector<int64_t>{128, 128});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message(),
            absl::StrCat("tensor 'model.layers.0.self_attn.k_proj.weight' in file '",
                         (kModels / "llama-tiny" / "model.safetensors").string(),
                         "' has shape [64, 128], expected [128, 128]"));
}

TEST(CheckpointTest, FindMissingTensorNamesTensorAndDirectory) {
  absl::StatusOr<std::unique_ptr<Checkpoint>> ckpt = Checkpoint::Open(kModels / "qwen2-tiny");
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  EXPECT_FALSE((*ckpt)->Contains("lm_head.weight"));  // tied
  absl::StatusOr<const TensorRecord*> r = (*ckpt)->Find("lm_head.weight");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(r.status().ToString(),
              AllOf(HasSubstr("'lm_head.weight'"), HasSubstr((kModels / "qwen2-tiny").string())));
  EXPECT_EQ((*ckpt)->FindFloat("nope", std::vector<int64_t>{1}).status().code(), absl::StatusCode::kNotFound);
}

// --- generated files ---

TEST(CheckpointTest, GeneratedFileRoundTrips) {
  TempDir dir;
  const std::vector<float> matrix = {0, 1, 2, 3, 4, 5};
  const std::vector<int64_t> ids = {-7, 1LL << 40};
  const std::vector<uint8_t> bytes = {1, 2, 3};
  const std::vector<uint16_t> scalar = {0x3c00};  // f16 1.0
  WriteFile(dir / "model.safetensors", BuildSafetensors({{"m", "F32", {2, 3}, Bytes(matrix)},
                                                         {"ids", "I64", {2}, Bytes(ids)},
                                                         {"u", "U8", {3}, Bytes(bytes)},
                                                         {"s", "F16", {}, Bytes(scalar)},
                                                         {"empty", "BF16", {0, 4}, ""}}));
  absl::StatusOr<std::unique_ptr<Checkpoint>> ckpt = Checkpoint::Open(dir.path());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  EXPECT_EQ((*ckpt)->TensorNames(), (std::vector<std::string>{"empty", "ids", "m", "s", "u"}));

  absl::StatusOr<const TensorRecord*> m = (*ckpt)->FindFloat("m", std::vector<int64_t>{2, 3});
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ((*m)->ShapeString(), "[2, 3]");
  EXPECT_EQ((*m)->numel(), 6);
  EXPECT_EQ(std::memcmp((*m)->data, matrix.data(), 24), 0);

  absl::StatusOr<const TensorRecord*> i = (*ckpt)->Find("ids");
  ASSERT_TRUE(i.ok());
  EXPECT_EQ((*i)->dtype, DType::kI64);
  EXPECT_EQ(std::memcmp((*i)->data, ids.data(), 16), 0);

  absl::StatusOr<const TensorRecord*> u = (*ckpt)->Find("u");
  ASSERT_TRUE(u.ok());
  EXPECT_EQ((*u)->dtype, DType::kU8);
  EXPECT_EQ(std::memcmp((*u)->data, bytes.data(), 3), 0);

  absl::StatusOr<const TensorRecord*> s = (*ckpt)->FindFloat("s", {});
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ((*s)->numel(), 1);
  EXPECT_EQ((*s)->ShapeString(), "[]");

  absl::StatusOr<const TensorRecord*> e = (*ckpt)->FindFloat("empty", std::vector<int64_t>{0, 4});
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ((*e)->bytes, 0u);
  EXPECT_EQ((*e)->numel(), 0);
}

TEST(CheckpointTest, UnsupportedDtypesFailOnlyWhenLookedUp) {
  TempDir dir;
  WriteFile(dir / "model.safetensors", BuildSafetensors({{"w", "F32", {2}, std::string(8, '\0')},
                                                         {"d", "F64", {2}, std::string(16, '\0')},
                                                         {"f8", "F8_E5M2", {4}, std::string(4, '\0')},
                                                         {"q", "Q4_K", {7}, std::string(5, '\0')}}));
  absl::StatusOr<std::unique_ptr<Checkpoint>> ckpt = Checkpoint::Open(dir.path());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  EXPECT_TRUE((*ckpt)->Find("w").ok());
  for (const char* name : {"d", "f8", "q"}) {
    SCOPED_TRACE(name);
    EXPECT_TRUE((*ckpt)->Contains(name));
    absl::StatusOr<const TensorRecord*> r = (*ckpt)->Find(name);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), absl::StatusCode::kUnimplemented);
    EXPECT_THAT(r.status().ToString(),
                AllOf(HasSubstr(absl::StrCat("'", name, "'")), HasSubstr("model.safetensors")));
  }
  EXPECT_THAT((*ckpt)->Find("d").status().ToString(), HasSubstr("F64"));
  EXPECT_THAT((*ckpt)->Find("q").status().ToString(), HasSubstr("Q4_K"));
}

TEST(CheckpointTest, IndexIsPreferredOverSingleFile) {
  TempDir dir;
  WriteFile(dir / "model.safetensors", BuildSafetensors({{"stale", "F32", {1}, std::string(4, '\0')}}));
  WriteFile(dir / "a.safetensors", BuildSafetensors({{"x", "F32", {1}, std::string(4, '\0')},
                                                     {"y", "F32", {1}, std::string(4, '\0')}}));
  WriteFile(dir / "model.safetensors.index.json", R"({"weight_map": {"x": "a.safetensors", "y": "a.safetensors"}})");
  absl::StatusOr<std::unique_ptr<Checkpoint>> ckpt = Checkpoint::Open(dir.path());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  EXPECT_TRUE((*ckpt)->Contains("x"));
  EXPECT_TRUE((*ckpt)->Contains("y"));
  EXPECT_FALSE((*ckpt)->Contains("stale"));
}

// --- malformed files: each error names the file, and the tensor where one is at fault ---

class CheckpointErrorTest : public ::testing::Test {
 protected:
  // Writes `bytes` as model.safetensors and opens the directory, which must fail.
  absl::Status OpenBytes(std::string_view bytes) {
    WriteFile(file(), bytes);
    absl::StatusOr<std::unique_ptr<Checkpoint>> ckpt = Checkpoint::Open(dir_.path());
    EXPECT_FALSE(ckpt.ok());
    if (ckpt.ok()) return absl::OkStatus();
    EXPECT_THAT(ckpt.status().ToString(), HasSubstr(file().string()));
    return ckpt.status();
  }
  // A header with one F32 [2, 2] tensor "t" described by `entry`, and `data_bytes` of data.
  absl::Status OpenEntry(const nlohmann::json& entry, size_t data_bytes = 16) {
    nlohmann::json header = {{"t", entry}};
    absl::Status s = OpenBytes(SafetensorsBytes(header.dump(), std::string(data_bytes, '\0')));
    EXPECT_THAT(s.ToString(), HasSubstr("'t'"));
    return s;
  }
  std::filesystem::path file() const { return dir_ / "model.safetensors"; }
  static std::string Valid() {
    return BuildSafetensors({{"a", "F32", {2, 2}, std::string(16, '\1')}, {"b", "BF16", {3}, std::string(6, '\2')}});
  }

  TempDir dir_;
};

TEST_F(CheckpointErrorTest, EmptyAndTinyFiles) {
  EXPECT_THAT(OpenBytes("").ToString(), HasSubstr("too short"));
  EXPECT_THAT(OpenBytes("\x10\0\0").ToString(), HasSubstr("too short"));
}

TEST_F(CheckpointErrorTest, HeaderCut) {
  const std::string valid = Valid();
  const size_t header_end = 8 + static_cast<uint8_t>(valid[0]) + 256 * static_cast<uint8_t>(valid[1]);
  for (size_t cut : {size_t{8}, size_t{20}, header_end - 1}) {
    SCOPED_TRACE(cut);
    absl::Status s = OpenBytes(valid.substr(0, cut));
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(s.ToString(), HasSubstr("header length"));
  }
}

TEST_F(CheckpointErrorTest, DataCut) {
  const std::string valid = Valid();
  absl::Status s = OpenBytes(valid.substr(0, valid.size() - 1));  // last byte of "b"
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.ToString(), AllOf(HasSubstr("'b'"), HasSubstr("beyond the data section")));
}

TEST_F(CheckpointErrorTest, EveryTruncationIsAnError) {
  const std::string valid = Valid();
  for (size_t len = 0; len < valid.size(); ++len) {
    SCOPED_TRACE(len);
    EXPECT_EQ(OpenBytes(valid.substr(0, len)).code(), absl::StatusCode::kInvalidArgument);
  }
}

// Corrupting any single header byte either fails cleanly or still yields records inside the file.
TEST_F(CheckpointErrorTest, CorruptedHeaderBytesNeverEscapeTheFile) {
  const std::string valid = Valid();
  const size_t header_end = 8 + static_cast<uint8_t>(valid[0]) + 256 * static_cast<uint8_t>(valid[1]);
  for (size_t pos = 0; pos < header_end; ++pos) {
    for (char replacement : {'\0', '9', '"', '}', ']', '-', 'F', '\xff'}) {
      std::string bytes = valid;
      bytes[pos] = replacement;
      WriteFile(file(), bytes);
      absl::StatusOr<std::unique_ptr<Checkpoint>> ckpt = Checkpoint::Open(dir_.path());
      if (!ckpt.ok()) continue;
      for (const std::string& name : (*ckpt)->TensorNames()) {
        absl::StatusOr<const TensorRecord*> r = (*ckpt)->Find(name);
        if (!r.ok()) continue;
        // Touch every byte: a record reaching past the mapping would fault here.
        volatile uint8_t sink = 0;
        for (size_t i = 0; i < (*r)->bytes; ++i) sink = sink + static_cast<const uint8_t*>((*r)->data)[i];
        EXPECT_LE((*r)->bytes, bytes.size()) << "pos " << pos;
      }
    }
  }
}

TEST_F(CheckpointErrorTest, HeaderLengthBeyondFile) {
  std::string bytes = SafetensorsBytes("{}", "");
  bytes[0] = '\x40';
  EXPECT_THAT(OpenBytes(bytes).ToString(), HasSubstr("header length 64"));
  bytes = std::string(8, '\xff') + "{}";  // 2^64 - 1
  EXPECT_THAT(OpenBytes(bytes).ToString(), HasSubstr("header length"));
}

TEST_F(CheckpointErrorTest, HeaderNotJson) {
  absl::Status s = OpenBytes(SafetensorsBytes("this is not json", ""));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.ToString(), AllOf(HasSubstr("malformed JSON"), HasSubstr("column")));
}

TEST_F(CheckpointErrorTest, HeaderNotAnObject) {
  EXPECT_THAT(OpenBytes(SafetensorsBytes("[1, 2]", "")).ToString(), HasSubstr("JSON object"));
}

TEST_F(CheckpointErrorTest, EntryNotAnObject) { EXPECT_THAT(OpenEntry(5).ToString(), HasSubstr("object")); }

TEST_F(CheckpointErrorTest, BadDtypeField) {
  EXPECT_THAT(OpenEntry({{"dtype", 3}, {"shape", {2, 2}}, {"data_offsets", {0, 16}}}).ToString(),
              HasSubstr("dtype"));
  EXPECT_THAT(OpenEntry({{"shape", {2, 2}}, {"data_offsets", {0, 16}}}).ToString(), HasSubstr("dtype"));
}

TEST_F(CheckpointErrorTest, BadShape) {
  EXPECT_THAT(OpenEntry({{"dtype", "F32"}, {"shape", {2, -2}}, {"data_offsets", {0, 16}}}).ToString(),
              HasSubstr("dimension"));
  EXPECT_THAT(OpenEntry({{"dtype", "F32"}, {"shape", "2x2"}, {"data_offsets", {0, 16}}}).ToString(),
              HasSubstr("shape"));
  EXPECT_THAT(OpenEntry({{"dtype", "F32"}, {"shape", {1LL << 40, 1LL << 40}}, {"data_offsets", {0, 16}}})
                  .ToString(),
              HasSubstr("overflows"));
}

TEST_F(CheckpointErrorTest, BadOffsets) {
  const nlohmann::json shape = {2, 2};
  for (const nlohmann::json& offsets :
       {nlohmann::json(nullptr), nlohmann::json({0}), nlohmann::json({0, 16, 32}), nlohmann::json({"0", 16}),
        nlohmann::json({-1, 15}), nlohmann::json({0.0, 16})}) {
    SCOPED_TRACE(offsets.dump());
    nlohmann::json entry = {{"dtype", "F32"}, {"shape", shape}};
    if (!offsets.is_null()) entry["data_offsets"] = offsets;
    EXPECT_THAT(OpenEntry(entry).ToString(), HasSubstr("data_offsets"));
  }
  EXPECT_THAT(OpenEntry({{"dtype", "F32"}, {"shape", shape}, {"data_offsets", {16, 0}}}).ToString(),
              HasSubstr("begin > end"));
  EXPECT_THAT(OpenEntry({{"dtype", "F32"}, {"shape", shape}, {"data_offsets", {8, 24}}}).ToString(),
              HasSubstr("beyond the data section of 16 bytes"));
  // Unknown dtypes skip the size check, never the bounds check.
  EXPECT_THAT(OpenEntry({{"dtype", "Q4_K"}, {"shape", shape}, {"data_offsets", {0, 17}}}).ToString(),
              HasSubstr("beyond the data section"));
}

TEST_F(CheckpointErrorTest, SizeMismatch) {
  absl::Status s = OpenEntry({{"dtype", "F32"}, {"shape", {2, 2}}, {"data_offsets", {0, 12}}});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.ToString(), AllOf(HasSubstr("12 bytes"), HasSubstr("[2, 2]"), HasSubstr("F32 needs 16")));
  // Unsupported-but-known dtypes are size-checked too.
  EXPECT_THAT(OpenEntry({{"dtype", "F64"}, {"shape", {2, 2}}, {"data_offsets", {0, 16}}}, 32).ToString(),
              HasSubstr("F64"));
}

TEST_F(CheckpointErrorTest, OverlappingTensors) {
  nlohmann::json header = {{"a", {{"dtype", "F32"}, {"shape", {2}}, {"data_offsets", {0, 8}}}},
                           {"b", {{"dtype", "F32"}, {"shape", {2}}, {"data_offsets", {4, 12}}}}};
  absl::Status s = OpenBytes(SafetensorsBytes(header.dump(), std::string(12, '\0')));
  EXPECT_THAT(s.ToString(), AllOf(HasSubstr("'a'"), HasSubstr("'b'"), HasSubstr("overlap")));
}

TEST_F(CheckpointErrorTest, OpenFileNamesMissingFile) {
  absl::StatusOr<std::unique_ptr<Checkpoint>> ckpt = Checkpoint::OpenFile(file());
  ASSERT_FALSE(ckpt.ok());
  EXPECT_EQ(ckpt.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(ckpt.status().ToString(), HasSubstr(file().string()));
}

// --- directories and shards ---

absl::Status OpenDir(const std::filesystem::path& dir) { return Checkpoint::Open(dir).status(); }

TEST(CheckpointDirTest, NeitherFileNorIndex) {
  TempDir dir;
  absl::Status s = OpenDir(dir.path());
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(s.ToString(), AllOf(HasSubstr(dir.path().string()), HasSubstr("model.safetensors")));

  s = OpenDir(dir / "nonexistent");
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(s.ToString(), HasSubstr((dir / "nonexistent").string()));

  WriteFile(dir / "model.safetensors", BuildSafetensors({{"x", "F32", {1}, std::string(4, '\0')}}));
  s = OpenDir(dir / "model.safetensors");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.ToString(), AllOf(HasSubstr((dir / "model.safetensors").string()), HasSubstr("not a directory")));
}

TEST(CheckpointDirTest, MissingShard) {
  TempDir dir;
  WriteFile(dir / "s1.safetensors", BuildSafetensors({{"x", "F32", {1}, std::string(4, '\0')}}));
  WriteFile(dir / "model.safetensors.index.json",
            R"({"metadata": {}, "weight_map": {"x": "s1.safetensors", "y": "s2.safetensors"}})");
  absl::Status s = OpenDir(dir.path());
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(s.ToString(), AllOf(HasSubstr((dir / "s2.safetensors").string()),
                                 HasSubstr("model.safetensors.index.json")));
}

TEST(CheckpointDirTest, TensorMissingFromItsShard) {
  TempDir dir;
  WriteFile(dir / "s1.safetensors", BuildSafetensors({{"x", "F32", {1}, std::string(4, '\0')}}));
  WriteFile(dir / "s2.safetensors", BuildSafetensors({{"y", "F32", {1}, std::string(4, '\0')}}));
  WriteFile(dir / "model.safetensors.index.json",
            R"({"weight_map": {"x": "s1.safetensors", "y": "s1.safetensors"}})");
  absl::Status s = OpenDir(dir.path());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.ToString(), AllOf(HasSubstr("'y'"), HasSubstr((dir / "s1.safetensors").string()),
                                 HasSubstr("model.safetensors.index.json")));
}

TEST(CheckpointDirTest, BrokenShardNamesTheShard) {
  TempDir dir;
  WriteFile(dir / "s1.safetensors", "\x05");
  WriteFile(dir / "model.safetensors.index.json", R"({"weight_map": {"x": "s1.safetensors"}})");
  absl::Status s = OpenDir(dir.path());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.ToString(), HasSubstr((dir / "s1.safetensors").string()));
}

TEST(CheckpointDirTest, MalformedIndex) {
  TempDir dir;
  const std::string index = (dir / "model.safetensors.index.json").string();
  WriteFile(index, R"({"weight_map": )");
  absl::Status s = OpenDir(dir.path());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.ToString(), AllOf(HasSubstr(index), HasSubstr("malformed JSON")));

  for (const char* text : {R"({"metadata": {}})", R"({"weight_map": {}})",
                           R"({"weight_map": {"x": 3}})", R"({"weight_map": {"x": "../outside.safetensors"}})",
                           R"({"weight_map": []})"}) {
    SCOPED_TRACE(text);
    WriteFile(index, text);
    s = OpenDir(dir.path());
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(s.ToString(), AllOf(HasSubstr(index), HasSubstr("weight_map")));
  }
}

}  // namespace
}  // namespace llm
