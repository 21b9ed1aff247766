#include "engine/model/config.h"

#include <string>

#include <nlohmann/json.hpp>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/model/test_files.h"

namespace llm {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

const std::filesystem::path kModels = std::filesystem::path(LLM_TEST_DATA_DIR) / "models";

// A small, valid Llama config in the older key style; tests change one thing at a time.
nlohmann::json BaseLlama() {
  return {
      {"architectures", {"LlamaForCausalLM"}},
      {"model_type", "llama"},
      {"hidden_size", 64},
      {"intermediate_size", 128},
      {"num_hidden_layers", 2},
      {"num_attention_heads", 4},
      {"num_key_value_heads", 2},
      {"vocab_size", 100},
      {"max_position_embeddings", 256},
      {"rms_norm_eps", 1e-5},
      {"hidden_act", "silu"},
      {"rope_theta", 10000.0},
      {"rope_scaling", nullptr},
      {"torch_dtype", "bfloat16"},
      {"bos_token_id", 1},
      {"eos_token_id", 2},
  };
}

nlohmann::json WithArchitecture(nlohmann::json j, const std::string& arch, const std::string& type) {
  j["architectures"] = {arch};
  j["model_type"] = type;
  return j;
}

absl::StatusOr<ModelConfig> Parse(const nlohmann::json& j) { return ParseModelConfig(j.dump(), "test/config.json"); }

// The error of parsing `j`, which must fail with `code`.
std::string ParseError(const nlohmann::json& j, absl::StatusCode code) {
  absl::StatusOr<ModelConfig> c = Parse(j);
  EXPECT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), code) << c.status();
  std::string message(c.status().ToString());
  EXPECT_THAT(message, HasSubstr("test/config.json"));
  return message;
}

// --- the fixtures ---

TEST(ConfigFixtureTest, LlamaTiny) {
  absl::StatusOr<ModelConfig> c = LoadModelConfig(kModels / "llama-tiny");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->architecture, Architecture::kLlama);
  EXPECT_EQ(c->model_type, "llama");
  EXPECT_EQ(c->hidden_size, 128);
  EXPECT_EQ(c->intermediate_size, 352);
  EXPECT_EQ(c->num_layers, 4);
  EXPECT_EQ(c->num_heads, 8);
  EXPECT_EQ(c->num_kv_heads, 4);
  EXPECT_EQ(c->head_dim, 16);
  EXPECT_EQ(c->vocab_size, 384);
  EXPECT_EQ(c->max_position_embeddings, 512);
  EXPECT_DOUBLE_EQ(c->rms_norm_eps, 1e-5);
  EXPECT_DOUBLE_EQ(c->rope_theta, 10000.0);
  EXPECT_EQ(c->rope_scaling.type, RopeType::kDefault);
  EXPECT_DOUBLE_EQ(c->partial_rotary_factor, 1.0);
  EXPECT_FALSE(c->tie_word_embeddings);
  EXPECT_FALSE(c->qkv_bias);
  EXPECT_FALSE(c->o_bias);
  EXPECT_FALSE(c->mlp_bias);
  EXPECT_FALSE(c->qk_norm);
  EXPECT_EQ(c->sliding_window, 0);
  EXPECT_EQ(c->stored_dtype, DType::kF32);
  EXPECT_EQ(c->bos_token_id, 1);
  EXPECT_THAT(c->eos_token_ids, ElementsAre(2));
  EXPECT_EQ(c->q_size(), 128);
  EXPECT_EQ(c->kv_size(), 64);
}

TEST(ConfigFixtureTest, LlamaTinySharded) {
  absl::StatusOr<ModelConfig> c = LoadModelConfig(kModels / "llama-tiny-sharded");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->architecture, Architecture::kLlama);
  EXPECT_EQ(c->num_kv_heads, 8);
  EXPECT_EQ(c->vocab_size, 384);
}

TEST(ConfigFixtureTest, Llama3TinyBf16OlderKeyStyle) {
  absl::StatusOr<ModelConfig> c = LoadModelConfig(kModels / "llama3-tiny-bf16");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->architecture, Architecture::kLlama);
  EXPECT_EQ(c->num_kv_heads, 2);
  EXPECT_EQ(c->intermediate_size, 384);
  EXPECT_EQ(c->vocab_size, 512);
  EXPECT_DOUBLE_EQ(c->rope_theta, 500000.0);
  EXPECT_EQ(c->rope_scaling.type, RopeType::kLlama3);
  EXPECT_DOUBLE_EQ(c->rope_scaling.factor, 8.0);
  EXPECT_DOUBLE_EQ(c->rope_scaling.low_freq_factor, 1.0);
  EXPECT_DOUBLE_EQ(c->rope_scaling.high_freq_factor, 4.0);
  EXPECT_EQ(c->rope_scaling.original_max_position_embeddings, 64);
  EXPECT_EQ(c->stored_dtype, DType::kBF16);
  EXPECT_THAT(c->eos_token_ids, ElementsAre(2));
}

TEST(ConfigFixtureTest, Qwen2Tiny) {
  absl::StatusOr<ModelConfig> c = LoadModelConfig(kModels / "qwen2-tiny");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->architecture, Architecture::kQwen2);
  EXPECT_EQ(c->model_type, "qwen2");
  EXPECT_EQ(c->vocab_size, 389);
  EXPECT_EQ(c->head_dim, 16);
  EXPECT_TRUE(c->qkv_bias);
  EXPECT_FALSE(c->o_bias);
  EXPECT_FALSE(c->qk_norm);
  EXPECT_TRUE(c->tie_word_embeddings);
  EXPECT_EQ(c->sliding_window, 0);  // use_sliding_window is false
  EXPECT_DOUBLE_EQ(c->rope_theta, 1e6);
  EXPECT_EQ(c->stored_dtype, DType::kF32);
  EXPECT_FALSE(c->bos_token_id.has_value());
  EXPECT_THAT(c->eos_token_ids, IsEmpty());
}

TEST(ConfigFixtureTest, Qwen3TinyFp16NewerKeyStyle) {
  absl::StatusOr<ModelConfig> c = LoadModelConfig(kModels / "qwen3-tiny-fp16");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->architecture, Architecture::kQwen3);
  EXPECT_EQ(c->hidden_size, 96);
  EXPECT_EQ(c->num_heads, 8);
  EXPECT_EQ(c->head_dim, 32);  // explicit, not 96 / 8
  EXPECT_EQ(c->q_size(), 256);
  EXPECT_EQ(c->kv_size(), 128);
  EXPECT_TRUE(c->qk_norm);
  EXPECT_FALSE(c->qkv_bias);
  EXPECT_TRUE(c->tie_word_embeddings);
  EXPECT_EQ(c->stored_dtype, DType::kF16);
  EXPECT_DOUBLE_EQ(c->rope_theta, 1e6);
  EXPECT_EQ(c->rope_scaling.type, RopeType::kDefault);
}

TEST(ConfigTest, ArchitectureNames) {
  EXPECT_EQ(ArchitectureName(Architecture::kLlama), "LlamaForCausalLM");
  EXPECT_EQ(ArchitectureName(Architecture::kMistral), "MistralForCausalLM");
  EXPECT_EQ(ArchitectureName(Architecture::kQwen2), "Qwen2ForCausalLM");
  EXPECT_EQ(ArchitectureName(Architecture::kQwen3), "Qwen3ForCausalLM");
}

// --- defaults and variants ---

TEST(ConfigTest, DefaultsWhenOptionalKeysAreAbsent) {
  nlohmann::json j = BaseLlama();
  for (const char* key : {"num_key_value_heads", "rope_theta", "rope_scaling", "torch_dtype", "rms_norm_eps",
                          "hidden_act", "bos_token_id", "eos_token_id"}) {
    j.erase(key);
  }
  absl::StatusOr<ModelConfig> c = Parse(j);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->num_kv_heads, 4);
  EXPECT_EQ(c->head_dim, 16);
  EXPECT_DOUBLE_EQ(c->rope_theta, 10000.0);
  EXPECT_EQ(c->rope_scaling.type, RopeType::kDefault);
  EXPECT_DOUBLE_EQ(c->partial_rotary_factor, 1.0);
  EXPECT_EQ(c->stored_dtype, DType::kF32);
  EXPECT_EQ(c->model_type, "llama");
  EXPECT_FALSE(c->bos_token_id.has_value());
  EXPECT_THAT(c->eos_token_ids, IsEmpty());
}

TEST(ConfigTest, NullHeadDimAndNullKvHeadsFallBack) {
  nlohmann::json j = BaseLlama();
  j["head_dim"] = nullptr;
  j["num_key_value_heads"] = nullptr;
  absl::StatusOr<ModelConfig> c = Parse(j);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->head_dim, 16);
  EXPECT_EQ(c->num_kv_heads, 4);
}

TEST(ConfigTest, LegacyTypeKeyAndLinearScaling) {
  nlohmann::json j = BaseLlama();
  j["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}};
  absl::StatusOr<ModelConfig> c = Parse(j);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->rope_scaling.type, RopeType::kLinear);
  EXPECT_DOUBLE_EQ(c->rope_scaling.factor, 2.0);
}

TEST(ConfigTest, YarnInRopeParameters) {
  nlohmann::json j = BaseLlama();
  j.erase("rope_theta");
  j.erase("rope_scaling");
  j["rope_parameters"] = {{"rope_theta", 20000.0},
                          {"rope_type", "yarn"},
                          {"factor", 4.0},
                          {"original_max_position_embeddings", 64},
                          {"beta_fast", 16.0},
                          {"beta_slow", 2.0},
                          {"attention_factor", 1.25},
                          {"partial_rotary_factor", 0.5}};
  absl::StatusOr<ModelConfig> c = Parse(j);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_DOUBLE_EQ(c->rope_theta, 20000.0);
  EXPECT_EQ(c->rope_scaling.type, RopeType::kYarn);
  EXPECT_DOUBLE_EQ(c->rope_scaling.factor, 4.0);
  EXPECT_EQ(c->rope_scaling.original_max_position_embeddings, 64);
  EXPECT_DOUBLE_EQ(c->rope_scaling.beta_fast, 16.0);
  EXPECT_DOUBLE_EQ(c->rope_scaling.beta_slow, 2.0);
  EXPECT_EQ(c->rope_scaling.attention_factor, 1.25);
  EXPECT_DOUBLE_EQ(c->partial_rotary_factor, 0.5);
  EXPECT_EQ(c->stored_dtype, DType::kBF16);
}

TEST(ConfigTest, DynamicScalingAndDtypeKey) {
  nlohmann::json j = BaseLlama();
  j.erase("torch_dtype");
  j["dtype"] = "float16";
  j["rope_scaling"] = {{"rope_type", "dynamic"}, {"factor", 2.0}};
  absl::StatusOr<ModelConfig> c = Parse(j);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->rope_scaling.type, RopeType::kDynamic);
  EXPECT_FALSE(c->rope_scaling.attention_factor.has_value());
  EXPECT_EQ(c->stored_dtype, DType::kF16);
}

TEST(ConfigTest, LlamaBiases) {
  nlohmann::json j = BaseLlama();
  j["attention_bias"] = true;
  j["mlp_bias"] = true;
  absl::StatusOr<ModelConfig> c = Parse(j);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->qkv_bias);
  EXPECT_TRUE(c->o_bias);
  EXPECT_TRUE(c->mlp_bias);
}

TEST(ConfigTest, MistralSlidingWindow) {
  nlohmann::json j = WithArchitecture(BaseLlama(), "MistralForCausalLM", "mistral");
  j["sliding_window"] = 4096;
  absl::StatusOr<ModelConfig> c = Parse(j);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->architecture, Architecture::kMistral);
  EXPECT_EQ(c->sliding_window, 4096);
  EXPECT_FALSE(c->qkv_bias);

  j["sliding_window"] = nullptr;
  c = Parse(j);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->sliding_window, 0);
}

TEST(ConfigTest, QwenSlidingWindowOnlyWhenEnabledForAllLayers) {
  nlohmann::json j = WithArchitecture(BaseLlama(), "Qwen2ForCausalLM", "qwen2");
  j["sliding_window"] = 32;
  j["use_sliding_window"] = false;
  absl::StatusOr<ModelConfig> c = Parse(j);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->sliding_window, 0);

  j["use_sliding_window"] = true;
  j["max_window_layers"] = 0;  // every layer slides
  c = Parse(j);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->sliding_window, 32);

  j["max_window_layers"] = 28;  // no layer reaches index 28
  c = Parse(j);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->sliding_window, 0);

  j["max_window_layers"] = 1;  // layer 1 slides, layer 0 does not
  EXPECT_THAT(ParseError(j, absl::StatusCode::kUnimplemented), HasSubstr("1 of 2 layers"));

  j["layer_types"] = {"sliding_attention", "sliding_attention"};  // layer_types wins
  c = Parse(j);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->sliding_window, 32);
}

TEST(ConfigTest, Qwen3AttentionBiasFromConfig) {
  nlohmann::json j = WithArchitecture(BaseLlama(), "Qwen3ForCausalLM", "qwen3");
  j["head_dim"] = 32;
  absl::StatusOr<ModelConfig> c = Parse(j);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->qk_norm);
  EXPECT_FALSE(c->qkv_bias);
  EXPECT_EQ(c->head_dim, 32);

  j["attention_bias"] = true;
  c = Parse(j);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->qkv_bias);
  EXPECT_TRUE(c->o_bias);
}

TEST(ConfigTest, EosListIsDeduplicated) {
  nlohmann::json j = BaseLlama();
  j["eos_token_id"] = {7, 2, 7};
  absl::StatusOr<ModelConfig> c = Parse(j);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_THAT(c->eos_token_ids, ElementsAre(7, 2));

  j["eos_token_id"] = nullptr;
  c = Parse(j);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_THAT(c->eos_token_ids, IsEmpty());
}

TEST(ConfigTest, LoadMergesGenerationConfigEos) {
  test_util::TempDir dir;
  test_util::WriteFile(dir / "config.json", BaseLlama().dump());
  test_util::WriteFile(dir / "generation_config.json", R"({"bos_token_id": 1, "eos_token_id": [2, 9, 9]})");
  absl::StatusOr<ModelConfig> c = LoadModelConfig(dir.path());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_THAT(c->eos_token_ids, ElementsAre(2, 9));
  EXPECT_EQ(c->bos_token_id, 1);

  test_util::WriteFile(dir / "generation_config.json", R"({"eos_token_id": 5})");
  c = LoadModelConfig(dir.path());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_THAT(c->eos_token_ids, ElementsAre(2, 5));
}

TEST(ConfigTest, LoadWithoutGenerationConfig) {
  test_util::TempDir dir;
  test_util::WriteFile(dir / "config.json", BaseLlama().dump());
  absl::StatusOr<ModelConfig> c = LoadModelConfig(dir.path());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_THAT(c->eos_token_ids, ElementsAre(2));
}

// --- errors ---

TEST(ConfigErrorTest, MissingRequiredKey) {
  for (const char* key : {"hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                          "vocab_size", "max_position_embeddings"}) {
    nlohmann::json j = BaseLlama();
    j.erase(key);
    std::string message = ParseError(j, absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(message, HasSubstr(std::string("'") + key + "'"));
    EXPECT_THAT(message, HasSubstr("missing"));
  }
}

TEST(ConfigErrorTest, WrongJsonTypes) {
  nlohmann::json j = BaseLlama();
  j["hidden_size"] = "64";
  EXPECT_THAT(ParseError(j, absl::StatusCode::kInvalidArgument),
              AllOf(HasSubstr("'hidden_size'"), HasSubstr("integer"), HasSubstr("string")));

  j = BaseLlama();
  j["num_attention_heads"] = 4.5;
  EXPECT_THAT(ParseError(j, absl::StatusCode::kInvalidArgument), HasSubstr("'num_attention_heads'"));

  j = BaseLlama();
  j["tie_word_embeddings"] = "yes";
  EXPECT_THAT(ParseError(j, absl::StatusCode::kInvalidArgument), HasSubstr("'tie_word_embeddings'"));

  j = BaseLlama();
  j["rope_scaling"] = {{"rope_type", "linear"}, {"factor", "2"}};
  EXPECT_THAT(ParseError(j, absl::StatusCode::kInvalidArgument), HasSubstr("'rope_scaling.factor'"));

  j = BaseLlama();
  j["rope_scaling"] = "linear";
  EXPECT_THAT(ParseError(j, absl::StatusCode::kInvalidArgument), HasSubstr("'rope_scaling'"));

  j = BaseLlama();
  j["eos_token_id"] = {2, "x"};
  EXPECT_THAT(ParseError(j, absl::StatusCode::kInvalidArgument), HasSubstr("'eos_token_id'"));

  j = BaseLlama();
  j["eos_token_id"] = -1;
  EXPECT_THAT(ParseError(j, absl::StatusCode::kInvalidArgument), HasSubstr("'eos_token_id'"));
}

TEST(ConfigErrorTest, NonPositiveSizes) {
  nlohmann::json j = BaseLlama();
  j["vocab_size"] = 0;
  EXPECT_THAT(ParseError(j, absl::StatusCode::kInvalidArgument),
              AllOf(HasSubstr("'vocab_size'"), HasSubstr("positive")));
  j = BaseLlama();
  j["num_key_value_heads"] = -2;
  EXPECT_THAT(ParseError(j, absl::StatusCode::kInvalidArgument), HasSubstr("'num_key_value_heads'"));
  j = BaseLlama();
  j["head_dim"] = 0;
  EXPECT_THAT(ParseError(j, absl::StatusCode::kInvalidArgument), HasSubstr("'head_dim'"));
  j = BaseLlama();
  j["rope_theta"] = 0;
  EXPECT_THAT(ParseError(j, absl::StatusCode::kInvalidArgument), HasSubstr("'rope_theta'"));
}

TEST(ConfigErrorTest, HeadsNotDivisible) {
  nlohmann::json j = BaseLlama();
  j["num_key_value_heads"] = 3;
  EXPECT_THAT(ParseError(j, absl::StatusCode::kInvalidArgument),
              AllOf(HasSubstr("'num_key_value_heads'"), HasSubstr("(3)"), HasSubstr("(4)")));

  j = BaseLlama();
  j["hidden_size"] = 66;  // 66 / 4 heads, no head_dim
  EXPECT_THAT(ParseError(j, absl::StatusCode::kInvalidArgument), HasSubstr("hidden_size"));
}

TEST(ConfigErrorTest, UnknownArchitecture) {
  nlohmann::json j = WithArchitecture(BaseLlama(), "GPT2LMHeadModel", "gpt2");
  EXPECT_THAT(ParseError(j, absl::StatusCode::kInvalidArgument),
              AllOf(HasSubstr("GPT2LMHeadModel"), HasSubstr("LlamaForCausalLM"), HasSubstr("MistralForCausalLM"),
                    HasSubstr("Qwen2ForCausalLM"), HasSubstr("Qwen3ForCausalLM")));
}

TEST(ConfigErrorTest, ModelTypeIsRequiredAndSupported) {
  nlohmann::json j = BaseLlama();
  j.erase("model_type");
  EXPECT_THAT(ParseError(j, absl::StatusCode::kInvalidArgument),
              AllOf(HasSubstr("'model_type'"), HasSubstr("missing"), HasSubstr("llama, mistral, qwen2, qwen3")));
  j["model_type"] = "gpt2";
  EXPECT_THAT(ParseError(j, absl::StatusCode::kInvalidArgument),
              AllOf(HasSubstr("'model_type'"), HasSubstr("'gpt2'"), HasSubstr("not supported")));
  j["model_type"] = 7;
  EXPECT_THAT(ParseError(j, absl::StatusCode::kInvalidArgument), HasSubstr("'model_type'"));
}

TEST(ConfigErrorTest, SpecialTokensOutsideTheVocabulary) {
  nlohmann::json j = BaseLlama();  // vocab_size 100
  j["eos_token_id"] = {2, 100};
  EXPECT_THAT(ParseError(j, absl::StatusCode::kInvalidArgument),
              AllOf(HasSubstr("'eos_token_id'"), HasSubstr("100"), HasSubstr("[0, 100)")));
  j = BaseLlama();
  j["bos_token_id"] = 4096;
  EXPECT_THAT(ParseError(j, absl::StatusCode::kInvalidArgument), AllOf(HasSubstr("'bos_token_id'"), HasSubstr("4096")));
  j = BaseLlama();
  j["eos_token_id"] = 99;  // the last row is inside
  EXPECT_TRUE(Parse(j).ok());
}

TEST(ConfigErrorTest, GenerationConfigEosOutsideTheVocabulary) {
  test_util::TempDir dir;
  test_util::WriteFile(dir / "config.json", BaseLlama().dump());
  test_util::WriteFile(dir / "generation_config.json", R"({"eos_token_id": [2, 128009]})");
  absl::StatusOr<ModelConfig> c = LoadModelConfig(dir.path());
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(c.status().message(),
              AllOf(HasSubstr("generation_config.json"), HasSubstr("'eos_token_id'"), HasSubstr("128009")));
}

TEST(ConfigErrorTest, ContextLengthBeyondTheSupportedMaximum) {
  nlohmann::json j = BaseLlama();
  j["max_position_embeddings"] = int64_t{1} << 62;
  EXPECT_THAT(ParseError(j, absl::StatusCode::kInvalidArgument),
              AllOf(HasSubstr("'max_position_embeddings'"), HasSubstr("4611686018427387904"),
                    HasSubstr("16777216"), HasSubstr("--max-context")));
  j["max_position_embeddings"] = kMaxContextLength;
  EXPECT_TRUE(Parse(j).ok());
}

TEST(ConfigErrorTest, MissingOrEmptyArchitectures) {
  nlohmann::json j = BaseLlama();
  j.erase("architectures");
  EXPECT_THAT(ParseError(j, absl::StatusCode::kInvalidArgument), HasSubstr("'architectures'"));
  j["architectures"] = nlohmann::json::array();
  EXPECT_THAT(ParseError(j, absl::StatusCode::kInvalidArgument), HasSubstr("'architectures'"));
}

TEST(ConfigErrorTest, UnsupportedRopeType) {
  nlohmann::json j = BaseLlama();
  j["rope_scaling"] = {{"rope_type", "longrope"}, {"factor", 2.0}};
  EXPECT_THAT(ParseError(j, absl::StatusCode::kUnimplemented),
              AllOf(HasSubstr("longrope"), HasSubstr("'rope_scaling.rope_type'"), HasSubstr("llama3")));

  j = BaseLlama();
  j.erase("rope_scaling");
  j["rope_parameters"] = {{"rope_theta", 1e4}, {"rope_type", "mrope"}};
  EXPECT_THAT(ParseError(j, absl::StatusCode::kUnimplemented),
              AllOf(HasSubstr("mrope"), HasSubstr("'rope_parameters.rope_type'")));
}

TEST(ConfigErrorTest, Llama3RopeNeedsOriginalContext) {
  nlohmann::json j = BaseLlama();
  j["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}};
  EXPECT_THAT(ParseError(j, absl::StatusCode::kInvalidArgument),
              HasSubstr("'rope_scaling.original_max_position_embeddings'"));
}

TEST(ConfigErrorTest, NonSiluActivation) {
  nlohmann::json j = BaseLlama();
  j["hidden_act"] = "gelu_pytorch_tanh";
  EXPECT_THAT(ParseError(j, absl::StatusCode::kUnimplemented),
              AllOf(HasSubstr("'hidden_act'"), HasSubstr("gelu_pytorch_tanh")));
}

TEST(ConfigErrorTest, UnsupportedDtype) {
  nlohmann::json j = BaseLlama();
  j["torch_dtype"] = "float64";
  EXPECT_THAT(ParseError(j, absl::StatusCode::kInvalidArgument),
              AllOf(HasSubstr("'torch_dtype'"), HasSubstr("float64")));
}

TEST(ConfigErrorTest, MalformedJsonReportsPosition) {
  absl::StatusOr<ModelConfig> c = ParseModelConfig("{\n  \"hidden_size\": 64,,\n}", "broken/config.json");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(c.status().ToString(),
              AllOf(HasSubstr("broken/config.json"), HasSubstr("line 2"), HasSubstr("column")));

  c = ParseModelConfig("", "empty/config.json");
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.status().ToString(), HasSubstr("empty/config.json"));
}

TEST(ConfigErrorTest, TopLevelMustBeAnObject) {
  absl::StatusOr<ModelConfig> c = ParseModelConfig("[1, 2]", "list/config.json");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(c.status().ToString(), AllOf(HasSubstr("list/config.json"), HasSubstr("JSON object")));
}

TEST(ConfigErrorTest, LoadNamesMissingFile) {
  test_util::TempDir dir;
  absl::StatusOr<ModelConfig> c = LoadModelConfig(dir.path());
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(c.status().ToString(), HasSubstr((dir / "config.json").string()));
}

TEST(ConfigErrorTest, LoadNamesBrokenGenerationConfig) {
  test_util::TempDir dir;
  test_util::WriteFile(dir / "config.json", BaseLlama().dump());
  test_util::WriteFile(dir / "generation_config.json", R"({"eos_token_id": [2,)");
  absl::StatusOr<ModelConfig> c = LoadModelConfig(dir.path());
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(c.status().ToString(), HasSubstr("generation_config.json"));

  test_util::WriteFile(dir / "generation_config.json", R"({"eos_token_id": "two"})");
  c = LoadModelConfig(dir.path());
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.status().ToString(), AllOf(HasSubstr("generation_config.json"), HasSubstr("'eos_token_id'")));
}

}  // namespace
}  // namespace llm
