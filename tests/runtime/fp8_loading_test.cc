// FP8 checkpoints on the CPU oracle: every published layout (tests/data/models/*-fp8-*) loads into
// the storage format this engine declares for it, sharded copies and tensor-parallel slices hold
// the same values, malformed checkpoints fail with a message naming the tensor and the scheme,
// float checkpoints quantize at load (--quantization fp8), and the FP8 KV cache and W8A8
// activation emulations stay close to the float32 references.
#include <cmath>
#include <filesystem>
#include <functional>
#include <numeric>

#include "engine/backend/cpu/cpu_backend.h"
#include "engine/backend/cpu/cpu_kernels.h"
#include "engine/model/dummy_weights.h"
#include "engine/runtime/model_runner.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/model/test_files.h"
#include "tests/runtime/checkpoint_copy.h"
#include "tests/runtime/fixture_reference.h"
#include "tests/runtime/recording_backend.h"
#include "tests/runtime/rounding_backend.h"

namespace llm {
namespace {

using ::testing::AllOf;
using testing::CheckpointCopy;
using ::testing::HasSubstr;
using testing::LoadCheckpointWeights;
using testing::LogitParity;

// Teacher-forced parity of `dir`'s model with the references of fixture `name`.
absl::StatusOr<LogitParity> Parity(const std::filesystem::path& dir, const std::string& name,
                                   const CpuBackendOptions& cpu, ModelRunnerOptions options) {
  ASSIGN_OR_RETURN(ModelConfig config, LoadModelConfig(dir));
  ASSIGN_OR_RETURN(auto checkpoint, Checkpoint::Open(dir));
  ASSIGN_OR_RETURN(auto runner,
                   ModelRunner::Create(config, *checkpoint, std::make_unique<CpuBackend>(cpu), nullptr, options));
  return testing::TeacherForcedParity(*runner, name);
}

CpuBackendOptions Cpu(bool emulate = false) {
  CpuBackendOptions o;
  o.num_threads = 2;
  o.emulate_fp8_activations = emulate;
  return o;
}

// --- formats ---

TEST(Fp8LoadingTest, BlockLayoutKeepsWholeBlocksAndExpandsCutOnes) {
  CpuBackend cpu(2);
  auto w = LoadCheckpointWeights(testing::ModelDir("llama-fp8-block"), cpu);
  ASSERT_TRUE(w.ok()) << w.status();
  const LayerWeights& l = (*w)->layers[0];
  // q (192 rows) ends mid-block, so k and v start mid-block in the fused q/k/v: per-row groups.
  EXPECT_EQ(l.qkv.format, StorageFormat::Fp8(ScaleGranularity::kGroup, 0, 128));
  EXPECT_EQ(l.qkv.scale.shape(), Shape({192 + 2 * 64, 2}));
  EXPECT_EQ(l.o_proj.format, StorageFormat::Fp8(ScaleGranularity::kBlock, 128, 128));
  EXPECT_EQ(l.o_proj.scale.shape(), Shape({2, 2}));
  EXPECT_EQ(l.gate_up.format, StorageFormat::Fp8(ScaleGranularity::kGroup, 0, 128));  // up starts at row 448
  EXPECT_EQ(l.down.format, StorageFormat::Fp8(ScaleGranularity::kBlock, 128, 128));
  EXPECT_EQ(l.down.scale.shape(), Shape({2, 4}));
  EXPECT_EQ(l.qkv.input_quant, ActivationQuant::kDynamicPerGroup);
  EXPECT_EQ(l.qkv.input_group, 128);
  EXPECT_EQ(l.qkv.weight.dtype(), DType::kF8E4M3);
  EXPECT_EQ((*w)->lm_head.format, StorageFormat::Float(DType::kF32));
  EXPECT_FALSE((*w)->has_kv_scales());
  // The expansion is exact: each row's group scale is its source block's.
  auto ckpt = Checkpoint::Open(testing::ModelDir("llama-fp8-block"));
  ASSERT_TRUE(ckpt.ok());
  const TensorRecord* k_scale = *(*ckpt)->Find("model.layers.0.self_attn.k_proj.weight_scale_inv");
  const float* expanded = l.qkv.scale.data_as<const float>();
  for (int64_t row = 0; row < 64; ++row)
    for (int64_t g = 0; g < 2; ++g)
      EXPECT_EQ(expanded[(192 + row) * 2 + g], static_cast<const float*>(k_scale->data)[g]) << row;
}

TEST(Fp8LoadingTest, ChannelLayoutKeepsRowScales) {
  CpuBackend cpu(2);
  auto w = LoadCheckpointWeights(testing::ModelDir("qwen3-fp8-channel"), cpu);
  ASSERT_TRUE(w.ok()) << w.status();
  const LayerWeights& l = (*w)->layers[2];
  EXPECT_EQ(l.qkv.format, StorageFormat::Fp8(ScaleGranularity::kChannel));
  EXPECT_EQ(l.qkv.scale.numel(), 128 + 2 * 64);
  EXPECT_EQ(l.gate_up.scale.numel(), 2 * 384);
  EXPECT_EQ(l.down.input_quant, ActivationQuant::kDynamicPerToken);
  // Tied embeddings: the LM head is the bf16 embedding, never quantized.
  EXPECT_EQ((*w)->lm_head.weight.data(), (*w)->embedding.data());
}

TEST(Fp8LoadingTest, ModelOptPerTensorScalesOfFusedPartsBecomeRowScales) {
  CpuBackend cpu(2);
  auto w = LoadCheckpointWeights(testing::ModelDir("llama-fp8-tensor-kv"), cpu);
  ASSERT_TRUE(w.ok()) << w.status();
  auto ckpt = Checkpoint::Open(testing::ModelDir("llama-fp8-tensor-kv"));
  ASSERT_TRUE(ckpt.ok());
  auto scalar = [&](const std::string& name) { return *static_cast<const float*>((*(*ckpt)->Find(name))->data); };
  const LayerWeights& l = (*w)->layers[1];
  const std::string p = "model.layers.1.";
  // q, k and v have scales of their own: one per row, each its part's.
  EXPECT_EQ(l.qkv.format, StorageFormat::Fp8(ScaleGranularity::kChannel));
  const float* s = l.qkv.scale.data_as<const float>();
  EXPECT_EQ(s[0], scalar(p + "self_attn.q_proj.weight_scale"));
  EXPECT_EQ(s[128], scalar(p + "self_attn.k_proj.weight_scale"));
  EXPECT_EQ(s[128 + 64], scalar(p + "self_attn.v_proj.weight_scale"));
  // A single projection keeps its one scale; static inputs take the largest of the parts'.
  EXPECT_EQ(l.o_proj.format, StorageFormat::Fp8(ScaleGranularity::kTensor));
  EXPECT_EQ(l.o_proj.input_quant, ActivationQuant::kStaticPerTensor);
  EXPECT_EQ(*l.qkv.input_scale.data_as<const float>(),
            std::max({scalar(p + "self_attn.q_proj.input_scale"), scalar(p + "self_attn.k_proj.input_scale"),
                      scalar(p + "self_attn.v_proj.input_scale")}));
  // The KV cache scales ride along.
  EXPECT_TRUE((*w)->has_kv_scales());
  EXPECT_EQ(l.k_scale, scalar(p + "self_attn.k_proj.k_scale"));
  EXPECT_EQ(l.v_scale, scalar(p + "self_attn.v_proj.v_scale"));
  EXPECT_NE(l.k_scale, 1.0f);
}

// A backend that takes no FP8 format gets the weights dequantized: the same model.
TEST(Fp8LoadingTest, BackendsWithoutFp8GetDequantizedWeights) {
  for (const char* name : testing::kFp8FixtureModels) {
    auto config = LoadModelConfig(testing::ModelDir(name));
    ASSERT_TRUE(config.ok());
    auto ckpt = Checkpoint::Open(testing::ModelDir(name));
    ASSERT_TRUE(ckpt.ok());
    auto runner = ModelRunner::Create(*config, **ckpt,
                                      std::make_unique<testing::RoundingBackend>(DType::kBF16, 0, config->vocab_size),
                                      nullptr, testing::ParityRunnerOptions());
    ASSERT_TRUE(runner.ok()) << runner.status();
    auto parity = testing::TeacherForcedParity(**runner, name);
    ASSERT_TRUE(parity.ok()) << parity.status();
    EXPECT_LE(parity->max_err, 1e-4) << name;
    EXPECT_EQ(parity->agreement(), 1.0) << name;
  }
}

// --- sharded files and tensor-parallel slices ---

TEST(Fp8LoadingTest, ShardedCopiesGiveTheSameLogits) {
  for (const char* name : testing::kFp8FixtureModels) {
    SCOPED_TRACE(name);
    test_util::TempDir dir;
    CheckpointCopy::Read(testing::ModelDir(name)).Write(dir.path(), /*shards=*/7);
    ASSERT_TRUE(std::filesystem::exists(dir / "model.safetensors.index.json"));
    auto parity = Parity(dir.path(), name, Cpu(), testing::ParityRunnerOptions());
    ASSERT_TRUE(parity.ok()) << parity.status();
    EXPECT_LE(parity->max_err, 1e-4);
    EXPECT_EQ(parity->agreement(), 1.0);
  }
}

// The same E4M3 bytes and scales under the other published configurations: AutoFP8 (per-tensor,
// static activations) and compressed-tensors per tensor from the ModelOpt fixture, compressed-
// tensors' block strategy from the block fixture (its `weight_scale_inv` renamed `weight_scale`).
// Each must load to the same model: the references' logits and greedy-position logits.
TEST(Fp8LoadingTest, EquivalentLayoutsLoadTheSameModel) {
  struct Variant {
    const char* fixture;
    const char* what;
    std::function<void(CheckpointCopy&)> edit;
  };
  const nlohmann::json fp8_weights_tensor = {{"num_bits", 8}, {"type", "float"}, {"strategy", "tensor"},
                                             {"symmetric", true}, {"dynamic", false}};
  const Variant variants[] = {
      {"llama-fp8-tensor-kv", "AutoFP8 static",
       [](CheckpointCopy& c) {
         c.extra_files.erase("hf_quant_config.json");
         c.config["quantization_config"] = {{"quant_method", "fp8"}, {"activation_scheme", "static"},
                                            {"ignored_layers", {"lm_head"}}};
       }},
      {"llama-fp8-tensor-kv", "compressed-tensors tensor/static with kv_cache_scheme",
       [&](CheckpointCopy& c) {
         c.extra_files.erase("hf_quant_config.json");
         c.config["quantization_config"] = {
             {"quant_method", "compressed-tensors"},
             {"format", "float-quantized"},
             {"config_groups",
              {{"group_0",
                {{"targets", {"Linear"}},
                 {"weights", fp8_weights_tensor},
                 {"input_activations", fp8_weights_tensor}}}}},
             {"ignore", {"re:.*lm_head"}},
             {"kv_cache_scheme", fp8_weights_tensor}};
         // llm-compressor keeps the KV scales on the attention module.
         for (int l = 0; l < 3; ++l) {
           const std::string a = absl::StrCat("model.layers.", l, ".self_attn.");
           auto k = c.tensors.extract(a + "k_proj.k_scale");
           k.mapped().name = a + "k_scale";
           k.key() = a + "k_scale";
           c.tensors.insert(std::move(k));
           auto v = c.tensors.extract(a + "v_proj.v_scale");
           v.mapped().name = a + "v_scale";
           v.key() = a + "v_scale";
           c.tensors.insert(std::move(v));
         }
       }},
      {"llama-fp8-block", "compressed-tensors block/group",
       [](CheckpointCopy& c) {
         c.config["quantization_config"] = {
             {"quant_method", "compressed-tensors"},
             {"format", "float-quantized"},
             {"config_groups",
              {{"group_0",
                {{"targets", {"Linear"}},
                 {"weights",
                  {{"num_bits", 8}, {"type", "float"}, {"strategy", "block"}, {"block_structure", {128, 128}}}},
                 {"input_activations",
                  {{"num_bits", 8}, {"type", "float"}, {"strategy", "group"}, {"group_size", 128},
                   {"dynamic", true}}}}}}},
             {"ignore", {"lm_head"}}};
         std::vector<std::string> names;
         for (const auto& [name, t] : c.tensors)
           if (name.ends_with(".weight_scale_inv")) names.push_back(name);
         for (const std::string& name : names) {
           auto node = c.tensors.extract(name);
           const std::string renamed = name.substr(0, name.size() - 4);  // "..._inv" -> "weight_scale"
           node.key() = renamed;
           node.mapped().name = renamed;
           c.tensors.insert(std::move(node));
         }
       }},
  };
  for (const Variant& v : variants) {
    SCOPED_TRACE(v.what);
    CheckpointCopy copy = CheckpointCopy::Read(testing::ModelDir(v.fixture));
    v.edit(copy);
    test_util::TempDir dir;
    copy.Write(dir.path());
    auto parity = Parity(dir.path(), v.fixture, Cpu(), testing::ParityRunnerOptions());
    ASSERT_TRUE(parity.ok()) << parity.status();
    EXPECT_LE(parity->max_err, 1e-4);
    EXPECT_EQ(parity->agreement(), 1.0);
    CpuBackend cpu(2);
    auto w = LoadCheckpointWeights(dir.path(), cpu);
    ASSERT_TRUE(w.ok()) << w.status();
    const bool kv_declared = std::string(v.what).find("kv_cache_scheme") != std::string::npos;
    EXPECT_EQ((*w)->has_kv_scales(), kv_declared || std::string(v.what).starts_with("AutoFP8"));
  }
}

// Each TP rank's slice of a fused FP8 linear holds exactly the rows (and row scales) of the whole.
TEST(Fp8LoadingTest, TensorParallelSlicesSplitRowsWithTheirScales) {
  CpuBackend cpu(2);
  const std::string dir = testing::ModelDir("qwen3-fp8-channel");
  auto whole = LoadCheckpointWeights(dir, cpu);
  ASSERT_TRUE(whole.ok()) << whole.status();
  const LinearWeight& full = (*whole)->layers[0].gate_up;  // [2 * 384, 128]: gate rows, then up rows
  for (int rank = 0; rank < 2; ++rank) {
    auto part = LoadCheckpointWeights(dir, cpu, ShardSpec{rank, 2});
    ASSERT_TRUE(part.ok()) << part.status();
    const LinearWeight& slice = (*part)->layers[0].gate_up;  // [2 * 192, 128]
    ASSERT_EQ(slice.weight.shape(), Shape({384, 128}));
    for (int64_t row = 0; row < 384; ++row) {
      const int64_t src = row < 192 ? rank * 192 + row : 384 + rank * 192 + row - 192;
      ASSERT_EQ(std::memcmp(slice.weight.data_as<uint8_t>() + row * 128, full.weight.data_as<uint8_t>() + src * 128,
                            128),
                0)
          << row;
      ASSERT_EQ(slice.scale.data_as<float>()[row], full.scale.data_as<float>()[src]) << row;
    }
    // Row-parallel down_proj: this rank's 192 input columns, every row's scale.
    const LinearWeight& down = (*part)->layers[0].down;
    EXPECT_EQ(down.weight.shape(), Shape({128, 192}));
    EXPECT_EQ(std::memcmp(down.scale.data(), (*whole)->layers[0].down.scale.data(), 128 * 4), 0);
  }
}

TEST(Fp8LoadingTest, BlockScalesRefuseTensorParallelSplitsOffBlockBoundaries) {
  CpuBackend cpu(2);
  // TP 2 splits o_proj's 192 input columns at 96, inside the first 128-column block.
  auto w = LoadCheckpointWeights(testing::ModelDir("llama-fp8-block"), cpu, ShardSpec{1, 2});
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(w.status().message(), AllOf(HasSubstr("layer 0 o_proj"), HasSubstr("o_proj.weight"),
                                          HasSubstr("128-column boundary"), HasSubstr("[96, 192)")));
}

TEST(Fp8LoadingTest, PipelineStagesLoadOnlyTheirLayers) {
  CpuBackend cpu(2);
  ShardSpec last;
  last.first_layer = 2;
  auto w = LoadCheckpointWeights(testing::ModelDir("llama-fp8-tensor-kv"), cpu, last);
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ((*w)->layers.size(), 1u);
  EXPECT_TRUE((*w)->embedding.empty());
  EXPECT_TRUE((*w)->has_kv_scales());
}

// --- malformed checkpoints ---

using Fp8MalformedTest = testing::EditedCheckpointTest;

TEST_F(Fp8MalformedTest, MissingScale) {
  const absl::Status s = LoadEdited("llama-fp8-block", [](CheckpointCopy& c) {
    c.tensors.erase("model.layers.1.mlp.up_proj.weight_scale_inv");
  });
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(s.message(), AllOf(HasSubstr("'model.layers.1.mlp.up_proj.weight_scale_inv'"),
                                 HasSubstr("128x128 weight blocks")));
}

TEST_F(Fp8MalformedTest, WrongScaleShape) {
  const absl::Status s = LoadEdited("llama-fp8-block", [](CheckpointCopy& c) {
    c.tensors["model.layers.0.self_attn.q_proj.weight_scale_inv"].shape = {1, 4};  // [2, 2] in the fixture
  });
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), AllOf(HasSubstr("'model.layers.0.self_attn.q_proj.weight_scale_inv'"),
                                 HasSubstr("[1, 4]"), HasSubstr("expected [2, 2]"), HasSubstr("fp8")));
}

TEST_F(Fp8MalformedTest, WrongChannelScaleShape) {
  const absl::Status s = LoadEdited("qwen3-fp8-channel", [](CheckpointCopy& c) {
    auto& t = c.tensors["model.layers.2.mlp.down_proj.weight_scale"];
    t.shape = {64, 1};
    t.data.resize(64 * 2);
  });
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), AllOf(HasSubstr("'model.layers.2.mlp.down_proj.weight_scale'"), HasSubstr("[64, 1]"),
                                 HasSubstr("expected [128, 1]"), HasSubstr("compressed-tensors")));
}

TEST_F(Fp8MalformedTest, UnknownStrategy) {
  const absl::Status s = LoadEdited("qwen3-fp8-channel", [](CheckpointCopy& c) {
    c.config["quantization_config"]["config_groups"]["group_0"]["weights"]["strategy"] = "attn_head";
  });
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(s.message(), AllOf(HasSubstr("config_groups.group_0.weights.strategy"), HasSubstr("'attn_head'"),
                                 HasSubstr("unknown")));
}

TEST_F(Fp8MalformedTest, BlockSize64) {
  const absl::Status s = LoadEdited("llama-fp8-block", [](CheckpointCopy& c) {
    c.config["quantization_config"]["weight_block_size"] = {64, 64};
  });
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(s.message(), AllOf(HasSubstr("quantization_config.weight_block_size"), HasSubstr("[64,64]"),
                                 HasSubstr("only [128, 128]")));
}

TEST_F(Fp8MalformedTest, Fp8LmHead) {
  const absl::Status s = LoadEdited("llama-fp8-tensor-kv", [](CheckpointCopy& c) {
    test_util::TensorSpec& head = c.tensors["lm_head.weight"];
    head.dtype = "F8_E4M3";
    head.data.resize(head.data.size() / 2);
    c.tensors["lm_head.weight_scale"] = {"lm_head.weight_scale", "F32", {}, test_util::Bytes<float>({0.01f})};
  });
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(s.message(),
              AllOf(HasSubstr("'lm_head.weight'"), HasSubstr("FP8 LM head"), HasSubstr("quantization_config")));
}

TEST_F(Fp8MalformedTest, FourBitWeights) {
  const absl::Status s = LoadEdited("qwen3-fp8-channel", [](CheckpointCopy& c) {
    c.config["quantization_config"]["config_groups"]["group_0"]["weights"]["num_bits"] = 4;
  });
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(s.message(), AllOf(HasSubstr("group_0.weights.num_bits"), HasSubstr("4-bit")));
}

TEST_F(Fp8MalformedTest, UnsupportedModelOptAlgorithm) {
  const absl::Status s = LoadEdited("llama-fp8-tensor-kv", [](CheckpointCopy& c) {
    c.config["quantization_config"]["quant_algo"] = "NVFP4";
  });
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(s.message(), AllOf(HasSubstr("quant_algo"), HasSubstr("'NVFP4'")));
}

TEST_F(Fp8MalformedTest, UnknownMethod) {
  const absl::Status s = LoadEdited("llama-fp8-tensor-kv", [](CheckpointCopy& c) {
    c.config["quantization_config"] = {{"quant_method", "bitsandbytes"}, {"load_in_4bit", true}};
  });
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(s.message(), AllOf(HasSubstr("quant_method"), HasSubstr("'bitsandbytes'")));
}

TEST_F(Fp8MalformedTest, DeclaredKvScalesMissing) {
  const absl::Status s = LoadEdited("llama-fp8-tensor-kv", [](CheckpointCopy& c) {
    c.tensors.erase("model.layers.2.self_attn.v_proj.v_scale");
  });
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(s.message(), AllOf(HasSubstr("layer 2"), HasSubstr("FP8 KV cache"),
                                 HasSubstr("model.layers.2.self_attn.v_proj.v_scale")));
}

TEST_F(Fp8MalformedTest, FloatWeightWhereTheSchemeSaysFp8) {
  const absl::Status s = LoadEdited("qwen3-fp8-channel", [](CheckpointCopy& c) {
    test_util::TensorSpec& w = c.tensors["model.layers.0.self_attn.k_proj.weight"];
    w.dtype = "BF16";
    w.data += w.data;
  });
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), AllOf(HasSubstr("'model.layers.0.self_attn.k_proj.weight'"), HasSubstr("bfloat16"),
                                 HasSubstr("F8_E4M3"), HasSubstr("compressed-tensors")));
}

TEST_F(Fp8MalformedTest, FusedPartsQuantizedDifferently) {
  const absl::Status s = LoadEdited("qwen3-fp8-channel", [](CheckpointCopy& c) {
    c.config["quantization_config"]["ignore"] = {"lm_head", "re:.*layers\\.1\\.mlp\\.up_proj"};
  });
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), AllOf(HasSubstr("layer 1 gate/up projection"), HasSubstr("quantized differently")));
}

// --- quantization at load (--quantization fp8) ---

TEST(Fp8OnlineQuantizationTest, FloatCheckpointQuantizesPerChannel) {
  CpuBackend cpu(2);
  LoadOptions fp8;
  fp8.quantization = OnlineQuantization::kFp8;
  auto w = LoadCheckpointWeights(testing::ModelDir("llama-tiny"), cpu, {}, fp8);
  ASSERT_TRUE(w.ok()) << w.status();
  for (const LayerWeights& l : (*w)->layers) {
    for (const LinearWeight* lin : {&l.qkv, &l.o_proj, &l.gate_up, &l.down}) {
      EXPECT_EQ(lin->format, StorageFormat::Fp8(ScaleGranularity::kChannel));
      EXPECT_EQ(lin->input_quant, ActivationQuant::kDynamicPerToken);
      EXPECT_EQ(lin->scale.numel(), lin->out_features());
    }
  }
  EXPECT_EQ((*w)->lm_head.format, StorageFormat::Float(DType::kF32));
  // Each row's largest element maps to +-448.
  const LinearWeight& o = (*w)->layers[0].o_proj;
  for (int64_t row = 0; row < o.out_features(); ++row) {
    int largest = 0;
    for (int64_t c = 0; c < o.in_features(); ++c) largest = std::max(largest, o.weight.data_as<uint8_t>()[row * o.in_features() + c] & 0x7f);
    EXPECT_EQ(largest, 0x7e) << row;
  }
}

// Scales come from whole checkpoint rows, so every TP layout quantizes to the same values: a
// row-parallel slice holds exactly its columns of the unsplit weight.
TEST(Fp8OnlineQuantizationTest, EveryTensorParallelLayoutQuantizesAlike) {
  CpuBackend cpu(2);
  LoadOptions fp8;
  fp8.quantization = OnlineQuantization::kFp8;
  const std::string dir = testing::ModelDir("llama-tiny");
  auto whole = LoadCheckpointWeights(dir, cpu, {}, fp8);
  ASSERT_TRUE(whole.ok()) << whole.status();
  const LinearWeight& full = (*whole)->layers[3].down;
  const int64_t n = full.out_features(), k = full.in_features();
  for (int rank = 0; rank < 4; ++rank) {
    auto part = LoadCheckpointWeights(dir, cpu, ShardSpec{rank, 4}, fp8);
    ASSERT_TRUE(part.ok()) << part.status();
    const LinearWeight& down = (*part)->layers[3].down;
    ASSERT_EQ(down.in_features(), k / 4);
    for (int64_t row = 0; row < n; ++row) {
      ASSERT_EQ(std::memcmp(down.weight.data_as<uint8_t>() + row * k / 4,
                            full.weight.data_as<uint8_t>() + row * k + rank * k / 4, k / 4),
                0);
      ASSERT_EQ(down.scale.data_as<float>()[row], full.scale.data_as<float>()[row]);
    }
  }
}

TEST(Fp8OnlineQuantizationTest, StaysCloseToTheFloat32Reference) {
  for (const char* name : testing::kFixtureModels) {
    ModelRunnerOptions options = testing::ParityRunnerOptions();
    options.load.quantization = OnlineQuantization::kFp8;
    auto parity = Parity(testing::ModelDir(name), name, Cpu(), options);
    ASSERT_TRUE(parity.ok()) << parity.status();
    std::printf("%-20s fp8 weights (per channel): top-1 %.2f%%, max err %.4f, mean err %.4f\n", name,
                100 * parity->agreement(), parity->max_err, parity->mean_err());
    // E4M3 keeps 3 mantissa bits against bf16's 7: about 10% of logit error on these random
    // models, whose top two logits are often close (a bf16 engine already moves 1-5% of their
    // top-1 choices, rounding_emulation_test), so top-1 moves at 15-20% of the positions. A wrong
    // scale (a factor off, a row or block misplaced) gives errors near 1 and top-1 near chance.
    EXPECT_GT(parity->max_err, 1e-3) << name;
    EXPECT_LT(parity->mean_err(), 0.2) << name;
    EXPECT_GE(parity->agreement(), 0.7) << name;
  }
}

TEST(Fp8OnlineQuantizationTest, DummyWeightsComeInFp8) {
  auto config = LoadModelConfig(testing::ModelDir("llama-tiny"));
  ASSERT_TRUE(config.ok());
  CpuBackend cpu(2);
  LoadOptions fp8;
  fp8.quantization = OnlineQuantization::kFp8;
  auto w = CreateDummyWeights(*config, ShardSpec{}, cpu, 7, fp8);
  ASSERT_TRUE(w.ok()) << w.status();
  const LinearWeight& gate_up = (*w)->layers[0].gate_up;
  EXPECT_EQ(gate_up.format, StorageFormat::Fp8(ScaleGranularity::kChannel));
  EXPECT_FLOAT_EQ(gate_up.scale.data_as<float>()[5], std::sqrt(3.0f / config->hidden_size) / 448.0f);
  // The E4M3 elements spread over their range.
  int saturated = 0;
  for (int64_t i = 0; i < gate_up.weight.numel(); ++i) saturated += (gate_up.weight.data_as<uint8_t>()[i] & 0x7f) >= 0x78;
  EXPECT_GT(saturated, 0);
  EXPECT_EQ((*w)->lm_head.format, StorageFormat::Float(DType::kF32));
}

// --- FP8 KV cache and W8A8 emulation on the CPU oracle ---

TEST(Fp8KvCacheTest, AutoKeepsTheOraclesFloat32CacheAndFp8IsSelectable) {
  const std::string name = "llama-fp8-tensor-kv";
  auto config = LoadModelConfig(testing::ModelDir(name));
  ASSERT_TRUE(config.ok());
  auto ckpt = Checkpoint::Open(testing::ModelDir(name));
  ASSERT_TRUE(ckpt.ok());
  auto runner = ModelRunner::Create(*config, **ckpt, std::make_unique<CpuBackend>(2), nullptr,
                                    testing::ParityRunnerOptions());
  ASSERT_TRUE(runner.ok()) << runner.status();
  EXPECT_EQ((*runner)->kv_shape().dtype, DType::kF32);
  const size_t f32_bytes = (*runner)->kv_cache_bytes();

  ModelRunnerOptions options = testing::ParityRunnerOptions();
  options.kv_cache_dtype = DType::kF8E4M3;
  runner = ModelRunner::Create(*config, **ckpt, std::make_unique<CpuBackend>(2), nullptr, options);
  ASSERT_TRUE(runner.ok()) << runner.status();
  EXPECT_EQ((*runner)->kv_shape().dtype, DType::kF8E4M3);
  EXPECT_EQ((*runner)->kv_cache_bytes() * 4, f32_bytes);  // a quarter of float32's bytes, half of bf16's
  const KvCacheLayer& layer = (*runner)->kv_cache_layers()[1];
  EXPECT_EQ(layer.k_scale, *static_cast<const float*>((*(*ckpt)->Find("model.layers.1.self_attn.k_proj.k_scale"))->data));
  EXPECT_NE(layer.k_scale, 1.0f);
  // The float32 CPU backend cannot hold a bf16 cache.
  options.kv_cache_dtype = DType::kBF16;
  EXPECT_EQ(ModelRunner::Create(*config, **ckpt, std::make_unique<CpuBackend>(2), nullptr, options).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// The calibrated scales of the ModelOpt fixture, and 1.0 everywhere (an uncalibrated FP8 cache):
// both stay near the float32 reference; what each costs is printed for benchmarks/RESULTS.md.
TEST(Fp8KvCacheTest, EmulatedFp8CacheStaysCloseToTheReference) {
  for (const char* name : testing::kFp8FixtureModels) {
    ModelRunnerOptions options = testing::ParityRunnerOptions();
    options.kv_cache_dtype = DType::kF8E4M3;
    auto parity = Parity(testing::ModelDir(name), name, Cpu(), options);
    ASSERT_TRUE(parity.ok()) << parity.status();
    std::printf("%-20s FP8 KV cache (%s scales): top-1 %.2f%%, max err %.4f, mean err %.4f\n", name,
                std::string(name) == "llama-fp8-tensor-kv" ? "calibrated" : "1.0", 100 * parity->agreement(),
                parity->max_err, parity->mean_err());
    EXPECT_GT(parity->max_err, 1e-4) << name;  // the cache really is FP8
    EXPECT_LT(parity->mean_err(), 0.12) << name;
    EXPECT_GE(parity->agreement(), 0.75) << name;
  }
}

TEST(Fp8ActivationEmulationTest, W8A8StaysCloseToTheReference) {
  for (const char* name : testing::kFp8FixtureModels) {
    auto parity = Parity(testing::ModelDir(name), name, Cpu(/*emulate=*/true), testing::ParityRunnerOptions());
    ASSERT_TRUE(parity.ok()) << parity.status();
    std::printf("%-20s W8A8 (activations as declared): top-1 %.2f%%, max err %.4f, mean err %.4f\n", name,
                100 * parity->agreement(), parity->max_err, parity->mean_err());
    EXPECT_GT(parity->max_err, 1e-4) << name;
    EXPECT_LT(parity->mean_err(), 0.2) << name;
    EXPECT_GE(parity->agreement(), 0.7) << name;
  }
}

// A W8A8 linear's input quantized by the op that produces it (AddRmsNormFp8, SiluMulFp8; what
// the CUDA backend fuses) gives exactly the logits of Linear quantizing it itself, for per-token
// (qwen3-fp8-channel) and static (llama-fp8-tensor-kv) input scales; per-group inputs (the block
// layout) are not taken that way.
TEST(Fp8ActivationEmulationTest, InputsQuantizedByTheProducingOpGiveTheSameLogits) {
  for (const char* name : testing::kFp8FixtureModels) {
    SCOPED_TRACE(name);
    const std::filesystem::path dir = testing::ModelDir(name);
    CpuBackendOptions unfused = Cpu(/*emulate=*/true);
    unfused.fuse_fp8_input_quant = false;
    auto reference = Parity(dir, name, unfused, testing::ParityRunnerOptions());
    ASSERT_TRUE(reference.ok()) << reference.status();
    auto config = LoadModelConfig(dir);
    auto checkpoint = Checkpoint::Open(dir);
    ASSERT_TRUE(config.ok() && checkpoint.ok());
    auto backend = std::make_unique<testing::RecordingBackend>(Cpu(/*emulate=*/true));
    testing::RecordingBackend* recording = backend.get();
    auto runner = ModelRunner::Create(*config, **checkpoint, std::move(backend), nullptr, testing::ParityRunnerOptions());
    ASSERT_TRUE(runner.ok()) << runner.status();
    auto fused = testing::TeacherForcedParity(**runner, name);
    ASSERT_TRUE(fused.ok()) << fused.status();
    EXPECT_EQ(fused->max_err, reference->max_err);
    EXPECT_EQ(fused->mean_err(), reference->mean_err());
    EXPECT_EQ(fused->agreement(), reference->agreement());
    if (std::string(name) == "llama-fp8-block") {
      EXPECT_EQ(recording->fp8_inputs_written, 0);
    } else {
      // q/k/v, gate/up and down of every layer (o_proj's input comes from attention).
      EXPECT_GT(recording->fp8_inputs_written, 0);
      EXPECT_EQ(recording->fp8_input_linears, recording->fp8_inputs_written);
    }
  }
}

// The emulated quantizer: per-token scales give each row's largest element +-448, per-group
// scales each group's, and static scales saturate what does not fit.
TEST(Fp8ActivationEmulationTest, FakeQuantizationMatchesTheFormula) {
  ThreadPool pool(2);
  std::vector<float> x(2 * 256), out(x.size());
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.37f * i) * (i < 128 ? 0.01f : 3.0f);
  cpu::FakeQuantizeFp8(pool, x.data(), out.data(), 2, 256, ActivationQuant::kDynamicPerToken, 0, 0);
  float amax = 0;
  for (int c = 0; c < 256; ++c) amax = std::max(amax, std::abs(x[c]));
  const float s = amax / 448.0f;
  for (int c = 0; c < 256; ++c) EXPECT_EQ(out[c], Fp8E4M3ToFloat(FloatToFp8E4M3(x[c] / s)) * s) << c;
  cpu::FakeQuantizeFp8(pool, x.data(), out.data(), 2, 256, ActivationQuant::kDynamicPerGroup, 128, 0);
  float amax0 = 0;
  for (int c = 0; c < 128; ++c) amax0 = std::max(amax0, std::abs(x[c]));
  EXPECT_EQ(out[5], Fp8E4M3ToFloat(FloatToFp8E4M3(x[5] / (amax0 / 448.0f))) * (amax0 / 448.0f));
  cpu::FakeQuantizeFp8(pool, x.data(), out.data(), 2, 256, ActivationQuant::kStaticPerTensor, 0, 0.001f);
  EXPECT_FLOAT_EQ(out[300], std::copysign(448.0f * 0.001f, x[300]));  // |x| ~ 3 > 448 * 0.001: saturated
}

}  // namespace
}  // namespace llm
