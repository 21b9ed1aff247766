#include "engine/model/config.h"

#include <algorithm>
#include <limits>
#include <string>
#include <system_error>
#include <utility>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/model/json_reader.h"
#include "kernels/core/status.h"

namespace llm {
namespace {

struct ArchitectureInfo {
  Architecture architecture;
  std::string_view hf_name;
  std::string_view model_type;
};

constexpr ArchitectureInfo kArchitectures[] = {
    {Architecture::kLlama, "LlamaForCausalLM", "llama"},
    {Architecture::kMistral, "MistralForCausalLM", "mistral"},
    {Architecture::kQwen2, "Qwen2ForCausalLM", "qwen2"},
    {Architecture::kQwen3, "Qwen3ForCausalLM", "qwen3"},
};

struct RopeTypeInfo {
  RopeType type;
  std::string_view name;
};

constexpr RopeTypeInfo kRopeTypes[] = {
    {RopeType::kDefault, "default"}, {RopeType::kLinear, "linear"}, {RopeType::kLlama3, "llama3"},
    {RopeType::kYarn, "yarn"},       {RopeType::kDynamic, "dynamic"},
};

// transformers' Qwen2Config default: layers from this index on use the sliding window.
constexpr int64_t kQwenDefaultMaxWindowLayers = 28;

template <typename Entry, size_t N>
std::string JoinNames(const Entry (&table)[N], std::string_view Entry::*field) {
  std::string out;
  for (const Entry& entry : table) absl::StrAppend(&out, out.empty() ? "" : ", ", std::string(entry.*field));
  return out;
}

// Stores an optional value into `out` when it was given; keeps `out`'s default otherwise.
template <typename T>
absl::Status AssignIfGiven(absl::StatusOr<std::optional<T>> value, T* out) {
  if (!value.ok()) return value.status();
  if (value->has_value()) *out = **value;
  return absl::OkStatus();
}

absl::StatusOr<int64_t> RequiredPositive(const JsonObjectReader& r, std::string_view key) {
  ASSIGN_OR_RETURN(int64_t value, r.RequiredInt(key));
  if (value <= 0) return r.KeyError(key, absl::StrCat("must be positive, got ", value));
  return value;
}

absl::StatusOr<std::optional<int64_t>> OptionalPositive(const JsonObjectReader& r, std::string_view key) {
  ASSIGN_OR_RETURN(std::optional<int64_t> value, r.OptionalInt(key));
  if (value && *value <= 0) return r.KeyError(key, absl::StrCat("must be positive, got ", *value));
  return value;
}

absl::StatusOr<const ArchitectureInfo*> ParseArchitecture(const JsonObjectReader& top) {
  const nlohmann::json* list = top.Find("architectures");
  if (list == nullptr) return top.KeyError("architectures", "is missing (required)");
  if (!list->is_array() || list->empty() || !list->front().is_string()) {
    return top.KeyError("architectures",
                        absl::StrCat("must be a non-empty list of class names, got ", DescribeJson(*list)));
  }
  const std::string& name = list->front().get_ref<const std::string&>();
  for (const ArchitectureInfo& info : kArchitectures) {
    if (info.hf_name == name) return &info;
  }
  return absl::InvalidArgumentError(absl::StrCat(top.source(), ": unsupported architecture '", name,
                                                 "' in key 'architectures' (supported: ",
                                                 JoinNames(kArchitectures, &ArchitectureInfo::hf_name), ")"));
}

// model_type says which family's conventions the checkpoint follows; transformers refuses a
// config without it, and a family this decoder does not implement must not load under another's
// class name.
absl::Status ParseModelType(const JsonObjectReader& top, ModelConfig* c) {
  ASSIGN_OR_RETURN(std::optional<std::string> model_type, top.OptionalString("model_type"));
  const std::string supported = JoinNames(kArchitectures, &ArchitectureInfo::model_type);
  if (!model_type)
    return top.KeyError("model_type", absl::StrCat("is missing (required; supported: ", supported, ")"));
  for (const ArchitectureInfo& info : kArchitectures) {
    if (info.model_type == *model_type) {
      c->model_type = *model_type;
      return absl::OkStatus();
    }
  }
  return top.KeyError("model_type", absl::StrCat("is '", *model_type, "', which is not supported (supported: ",
                                                 supported, ")"));
}

// Special tokens the engine stops on or the tokenizer adds must be rows of the embedding: an id
// past the vocabulary would stop nothing (EOS) or index past the table (BOS).
absl::Status CheckSpecialTokensInVocabulary(const JsonObjectReader& r, const ModelConfig& c) {
  auto outside = [&](std::string_view key, int32_t id) {
    return r.KeyError(key, absl::StrCat("holds token id ", id, ", outside the vocabulary [0, ", c.vocab_size,
                                        ") of vocab_size"));
  };
  if (c.bos_token_id && *c.bos_token_id >= c.vocab_size) return outside("bos_token_id", *c.bos_token_id);
  for (int32_t id : c.eos_token_ids)
    if (id >= c.vocab_size) return outside("eos_token_id", id);
  return absl::OkStatus();
}

absl::Status ParseSizes(const JsonObjectReader& top, ModelConfig* c) {
  ASSIGN_OR_RETURN(c->hidden_size, RequiredPositive(top, "hidden_size"));
  ASSIGN_OR_RETURN(c->intermediate_size, RequiredPositive(top, "intermediate_size"));
  ASSIGN_OR_RETURN(c->num_layers, RequiredPositive(top, "num_hidden_layers"));
  ASSIGN_OR_RETURN(c->num_heads, RequiredPositive(top, "num_attention_heads"));
  ASSIGN_OR_RETURN(c->vocab_size, RequiredPositive(top, "vocab_size"));
  ASSIGN_OR_RETURN(c->max_position_embeddings, RequiredPositive(top, "max_position_embeddings"));
  if (c->max_position_embeddings > kMaxContextLength)
    return top.KeyError("max_position_embeddings",
                        absl::StrCat("is ", c->max_position_embeddings, "; at most ", kMaxContextLength,
                                     " tokens of context are supported (serve a shorter one with --max-context)"));

  ASSIGN_OR_RETURN(std::optional<int64_t> kv_heads, OptionalPositive(top, "num_key_value_heads"));
  c->num_kv_heads = kv_heads.value_or(c->num_heads);  // absent: plain multi-head attention
  if (c->num_heads % c->num_kv_heads != 0) {
    return top.KeyError("num_key_value_heads",
                        absl::StrCat("(", c->num_kv_heads, ") must divide num_attention_heads (",
                                     c->num_heads, ")"));
  }

  // Qwen3 (and some Mistral sizes) set head_dim explicitly, unequal to hidden_size / heads.
  ASSIGN_OR_RETURN(std::optional<int64_t> head_dim, OptionalPositive(top, "head_dim"));
  if (head_dim) {
    c->head_dim = *head_dim;
  } else if (c->hidden_size % c->num_heads != 0) {
    return top.KeyError("num_attention_heads",
                        absl::StrCat("(", c->num_heads, ") must divide hidden_size (", c->hidden_size,
                                     ") when head_dim is not given"));
  } else {
    c->head_dim = c->hidden_size / c->num_heads;
  }

  RETURN_IF_ERROR(AssignIfGiven(top.OptionalDouble("rms_norm_eps"), &c->rms_norm_eps));
  if (!(c->rms_norm_eps > 0)) {
    return top.KeyError("rms_norm_eps", absl::StrCat("must be positive, got ", c->rms_norm_eps));
  }
  return absl::OkStatus();
}

absl::Status CheckActivation(const JsonObjectReader& top) {
  ASSIGN_OR_RETURN(std::optional<std::string> act, top.OptionalString("hidden_act"));
  if (act && *act != "silu") {
    return absl::UnimplementedError(absl::StrCat(top.source(), ": key 'hidden_act' is '", *act,
                                                 "'; only 'silu' (SwiGLU) is supported"));
  }
  return absl::OkStatus();
}

absl::StatusOr<RopeType> ParseRopeType(const JsonObjectReader& r) {
  // Older configs spell the key `type`.
  const std::string_view key = r.Find("rope_type") != nullptr ? "rope_type" : "type";
  ASSIGN_OR_RETURN(std::optional<std::string> name, r.OptionalString(key));
  if (!name) return RopeType::kDefault;
  for (const RopeTypeInfo& info : kRopeTypes) {
    if (info.name == *name) return info.type;
  }
  return absl::UnimplementedError(absl::StrCat(r.source(), ": key '", r.KeyPath(key),
                                               "' has unsupported rope type '", *name, "' (supported: ",
                                               JoinNames(kRopeTypes, &RopeTypeInfo::name), ")"));
}

absl::StatusOr<RopeScaling> ParseRopeScaling(const JsonObjectReader& r) {
  RopeScaling s;
  ASSIGN_OR_RETURN(s.type, ParseRopeType(r));
  RETURN_IF_ERROR(AssignIfGiven(r.OptionalDouble("factor"), &s.factor));
  RETURN_IF_ERROR(AssignIfGiven(r.OptionalDouble("low_freq_factor"), &s.low_freq_factor));
  RETURN_IF_ERROR(AssignIfGiven(r.OptionalDouble("high_freq_factor"), &s.high_freq_factor));
  RETURN_IF_ERROR(
      AssignIfGiven(r.OptionalInt("original_max_position_embeddings"), &s.original_max_position_embeddings));
  RETURN_IF_ERROR(AssignIfGiven(r.OptionalDouble("beta_fast"), &s.beta_fast));
  RETURN_IF_ERROR(AssignIfGiven(r.OptionalDouble("beta_slow"), &s.beta_slow));
  ASSIGN_OR_RETURN(s.attention_factor, r.OptionalDouble("attention_factor"));

  if (!(s.factor > 0)) return r.KeyError("factor", absl::StrCat("must be positive, got ", s.factor));
  if (s.original_max_position_embeddings < 0) {
    return r.KeyError("original_max_position_embeddings",
                      absl::StrCat("must not be negative, got ", s.original_max_position_embeddings));
  }
  if (s.type == RopeType::kLlama3) {
    // The llama3 frequency bands are defined relative to the original context length.
    if (s.original_max_position_embeddings == 0) {
      return r.KeyError("original_max_position_embeddings", "is required for rope type 'llama3'");
    }
    if (!(s.high_freq_factor > s.low_freq_factor)) {
      return r.KeyError("high_freq_factor", absl::StrCat("(", s.high_freq_factor,
                                                         ") must exceed low_freq_factor (",
                                                         s.low_freq_factor, ") for rope type 'llama3'"));
    }
  }
  return s;
}

absl::Status ParseRope(const JsonObjectReader& top, ModelConfig* c) {
  // Newer transformers write one `rope_parameters` object holding theta and the scaling keys;
  // older ones a top-level `rope_theta` and an optional, often null, `rope_scaling`.
  ASSIGN_OR_RETURN(std::optional<JsonObjectReader> params, top.OptionalObject("rope_parameters"));
  ASSIGN_OR_RETURN(std::optional<JsonObjectReader> legacy, top.OptionalObject("rope_scaling"));

  const JsonObjectReader* theta_source = &top;
  if (params && params->Find("rope_theta") != nullptr) theta_source = &*params;
  RETURN_IF_ERROR(AssignIfGiven(theta_source->OptionalDouble("rope_theta"), &c->rope_theta));
  if (!(c->rope_theta > 0)) {
    return theta_source->KeyError("rope_theta", absl::StrCat("must be positive, got ", c->rope_theta));
  }

  if (params) {
    ASSIGN_OR_RETURN(c->rope_scaling, ParseRopeScaling(*params));
  } else if (legacy) {
    ASSIGN_OR_RETURN(c->rope_scaling, ParseRopeScaling(*legacy));
  }

  const JsonObjectReader* partial_source = &top;
  if (params && params->Find("partial_rotary_factor") != nullptr) partial_source = &*params;
  RETURN_IF_ERROR(
      AssignIfGiven(partial_source->OptionalDouble("partial_rotary_factor"), &c->partial_rotary_factor));
  if (!(c->partial_rotary_factor > 0 && c->partial_rotary_factor <= 1)) {
    return partial_source->KeyError("partial_rotary_factor",
                                    absl::StrCat("must be in (0, 1], got ", c->partial_rotary_factor));
  }
  return absl::OkStatus();
}

// How many layers use the sliding window in a Qwen2/Qwen3 config with use_sliding_window set.
absl::StatusOr<int64_t> CountQwenSlidingLayers(const JsonObjectReader& top, int64_t num_layers) {
  if (const nlohmann::json* types = top.Find("layer_types")) {
    if (!types->is_array() || static_cast<int64_t>(types->size()) != num_layers) {
      return top.KeyError("layer_types", absl::StrCat("must be a list of ", num_layers,
                                                      " layer type names, got ", DescribeJson(*types)));
    }
    return std::count(types->begin(), types->end(), nlohmann::json("sliding_attention"));
  }
  int64_t max_window_layers = kQwenDefaultMaxWindowLayers;
  RETURN_IF_ERROR(AssignIfGiven(top.OptionalInt("max_window_layers"), &max_window_layers));
  return std::clamp<int64_t>(num_layers - max_window_layers, 0, num_layers);
}

absl::StatusOr<int64_t> ParseSlidingWindow(const JsonObjectReader& top, const ModelConfig& c) {
  ASSIGN_OR_RETURN(std::optional<int64_t> window, top.OptionalInt("sliding_window"));
  if (window && *window < 0) {
    return top.KeyError("sliding_window", absl::StrCat("must not be negative, got ", *window));
  }
  switch (c.architecture) {
    case Architecture::kLlama:
      return 0;
    case Architecture::kMistral:
      return window.value_or(0);
    case Architecture::kQwen2:
    case Architecture::kQwen3:
      break;
  }
  // Qwen configs always carry a sliding_window value; it only applies with use_sliding_window,
  // and then only to the layers from max_window_layers on (or those layer_types marks).
  ASSIGN_OR_RETURN(std::optional<bool> use, top.OptionalBool("use_sliding_window"));
  if (!use.value_or(false) || window.value_or(0) == 0) return 0;
  ASSIGN_OR_RETURN(int64_t sliding_layers, CountQwenSlidingLayers(top, c.num_layers));
  if (sliding_layers == 0) return 0;
  if (sliding_layers == c.num_layers) return *window;
  return absl::UnimplementedError(absl::StrCat(
      top.source(), ": use_sliding_window applies the window to ", sliding_layers, " of ", c.num_layers,
      " layers (max_window_layers / layer_types); a per-layer mix is not supported"));
}

absl::Status ParseVariant(const JsonObjectReader& top, ModelConfig* c) {
  bool attention_bias = false;
  bool mlp_bias = false;
  RETURN_IF_ERROR(AssignIfGiven(top.OptionalBool("attention_bias"), &attention_bias));
  RETURN_IF_ERROR(AssignIfGiven(top.OptionalBool("mlp_bias"), &mlp_bias));
  RETURN_IF_ERROR(AssignIfGiven(top.OptionalBool("tie_word_embeddings"), &c->tie_word_embeddings));
  switch (c->architecture) {
    case Architecture::kLlama:
      c->qkv_bias = c->o_bias = attention_bias;
      c->mlp_bias = mlp_bias;
      break;
    case Architecture::kMistral:
      c->qkv_bias = c->o_bias = attention_bias;
      break;
    case Architecture::kQwen2:
      // Qwen2 hard-codes biases on q/k/v (not o); its config has no key for them.
      c->qkv_bias = true;
      break;
    case Architecture::kQwen3:
      c->qk_norm = true;
      c->qkv_bias = c->o_bias = attention_bias;
      break;
  }
  ASSIGN_OR_RETURN(c->sliding_window, ParseSlidingWindow(top, *c));
  return absl::OkStatus();
}

absl::StatusOr<DType> ParseStoredDType(const JsonObjectReader& top) {
  // transformers 5 writes `dtype`, older versions `torch_dtype`.
  const std::string_view key = top.Find("dtype") != nullptr ? "dtype" : "torch_dtype";
  ASSIGN_OR_RETURN(std::optional<std::string> name, top.OptionalString(key));
  if (!name) return DType::kF32;
  absl::StatusOr<DType> dtype = ParseDType(*name);
  if (!dtype.ok()) {
    return top.KeyError(key, absl::StrCat("has unsupported dtype '", *name,
                                          "' (expected bfloat16, float16 or float32)"));
  }
  return *dtype;
}

absl::StatusOr<int32_t> ToTokenId(const JsonObjectReader& r, std::string_view key, const nlohmann::json& v) {
  std::optional<int64_t> id = JsonToInt64(v);
  if (!id || *id < 0 || *id > std::numeric_limits<int32_t>::max()) {
    return r.KeyError(key, absl::StrCat("must hold non-negative 32-bit token ids, got ", DescribeJson(v)));
  }
  return static_cast<int32_t>(*id);
}

// Appends the token id(s) of `key` (an int, a list of ints, or null) to `ids`, skipping duplicates.
absl::Status AppendTokenIds(const JsonObjectReader& r, std::string_view key, std::vector<int32_t>* ids) {
  const nlohmann::json* v = r.Find(key);
  if (v == nullptr) return absl::OkStatus();
  auto append = [&](const nlohmann::json& item) -> absl::Status {
    ASSIGN_OR_RETURN(int32_t id, ToTokenId(r, key, item));
    if (std::find(ids->begin(), ids->end(), id) == ids->end()) ids->push_back(id);
    return absl::OkStatus();
  };
  if (!v->is_array()) return append(*v);
  for (const nlohmann::json& item : *v) RETURN_IF_ERROR(append(item));
  return absl::OkStatus();
}

absl::Status ParseSpecialTokens(const JsonObjectReader& r, ModelConfig* c) {
  if (const nlohmann::json* bos = r.Find("bos_token_id"); bos != nullptr && !c->bos_token_id) {
    ASSIGN_OR_RETURN(c->bos_token_id, ToTokenId(r, "bos_token_id", *bos));
  }
  return AppendTokenIds(r, "eos_token_id", &c->eos_token_ids);
}

absl::StatusOr<ModelConfig> ParseConfigDocument(const nlohmann::json& doc, std::string_view source) {
  ASSIGN_OR_RETURN(JsonObjectReader top, JsonObjectReader::Create(doc, std::string(source)));
  ModelConfig c;
  ASSIGN_OR_RETURN(const ArchitectureInfo* arch, ParseArchitecture(top));
  c.architecture = arch->architecture;
  RETURN_IF_ERROR(ParseModelType(top, &c));
  RETURN_IF_ERROR(CheckActivation(top));
  RETURN_IF_ERROR(ParseSizes(top, &c));
  RETURN_IF_ERROR(ParseRope(top, &c));
  RETURN_IF_ERROR(ParseVariant(top, &c));
  ASSIGN_OR_RETURN(c.stored_dtype, ParseStoredDType(top));
  RETURN_IF_ERROR(ParseSpecialTokens(top, &c));
  RETURN_IF_ERROR(CheckSpecialTokensInVocabulary(top, c));
  if (const nlohmann::json* q = top.Find("quantization_config")) {
    ASSIGN_OR_RETURN(c.quantization, ParseQuantizationConfig(*q, std::string(source), "quantization_config"));
  }
  return c;
}

// generation_config.json's eos_token_id is what generation actually stops on (Llama 3 Instruct
// lists <|eot_id|> only there), so it extends config.json's list.
absl::Status MergeGenerationConfig(const std::filesystem::path& path, ModelConfig* c) {
  ASSIGN_OR_RETURN(std::string text, ReadTextFile(path));
  ASSIGN_OR_RETURN(nlohmann::json doc, ParseJsonText(text, path.string()));
  ASSIGN_OR_RETURN(JsonObjectReader top, JsonObjectReader::Create(doc, path.string()));
  RETURN_IF_ERROR(ParseSpecialTokens(top, c));
  return CheckSpecialTokensInVocabulary(top, *c);
}

}  // namespace

std::string_view ArchitectureName(Architecture a) {
  for (const ArchitectureInfo& info : kArchitectures) {
    if (info.architecture == a) return info.hf_name;
  }
  return "unknown";
}

absl::StatusOr<ModelConfig> ParseModelConfig(std::string_view json_text, std::string_view source) {
  ASSIGN_OR_RETURN(nlohmann::json doc, ParseJsonText(json_text, source));
  // Every access goes through JsonObjectReader, which does not throw; this catch only keeps a
  // missed case from escaping the API as an exception.
  try {
    return ParseConfigDocument(doc, source);
  } catch (const nlohmann::json::exception& e) {
    return absl::InternalError(absl::StrCat(std::string(source), ": unexpected JSON error: ", e.what()));
  }
}

double LmHeadLayerEquivalents(const ModelConfig& c) {
  const double layer = static_cast<double>(c.hidden_size) * (2.0 * c.q_size() + 2.0 * c.kv_size()) +
                       3.0 * static_cast<double>(c.hidden_size) * static_cast<double>(c.intermediate_size);
  if (layer <= 0) return 0.0;
  return static_cast<double>(c.vocab_size) * static_cast<double>(c.hidden_size) / layer;
}

absl::StatusOr<ModelConfig> LoadModelConfig(const std::filesystem::path& dir) {
  const std::filesystem::path config_path = dir / "config.json";
  ASSIGN_OR_RETURN(std::string text, ReadTextFile(config_path));
  ASSIGN_OR_RETURN(ModelConfig config, ParseModelConfig(text, config_path.string()));

  std::error_code ec;
  // ModelOpt exports its quantization in a file of its own; newer exports repeat it in
  // config.json, which then wins.
  const std::filesystem::path modelopt_path = dir / "hf_quant_config.json";
  if (!config.quantization.quantized() && std::filesystem::exists(modelopt_path, ec)) {
    ASSIGN_OR_RETURN(std::string modelopt_text, ReadTextFile(modelopt_path));
    ASSIGN_OR_RETURN(nlohmann::json modelopt, ParseJsonText(modelopt_text, modelopt_path.string()));
    ASSIGN_OR_RETURN(config.quantization,
                     ParseQuantizationConfig(modelopt, modelopt_path.string(), "", QuantMethod::kModelOpt));
  }
  const std::filesystem::path generation_path = dir / "generation_config.json";
  if (!std::filesystem::exists(generation_path, ec)) return config;
  try {
    RETURN_IF_ERROR(MergeGenerationConfig(generation_path, &config));
  } catch (const nlohmann::json::exception& e) {
    return absl::InternalError(
        absl::StrCat(generation_path.string(), ": unexpected JSON error: ", e.what()));
  }
  return config;
}

}  // namespace llm
