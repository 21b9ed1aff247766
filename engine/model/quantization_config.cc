#include "engine/model/quantization_config.h"

#include <fnmatch.h>

#include <regex>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/model/json_reader.h"
#include "kernels/core/status.h"

namespace llm {
namespace {

constexpr int32_t kBlock = 128;  // the only block / group size the kernels take
constexpr char kRegexPrefix[] = "re:";
constexpr char kGlobPrefix[] = "glob:";
constexpr char kSupported[] =
    "supported: quant_method 'fp8' (128x128 blocks or per-tensor), 'compressed-tensors' (float-quantized FP8) "
    "and 'modelopt' (FP8)";

// A module matches a plain name when it is that name or a run of its dotted components
// ("lm_head", "mlp.down_proj", "model.layers.0").
bool MatchesName(const std::string& name, const std::string& module) {
  if (name.empty()) return false;
  if (module == name) return true;
  const std::string dotted = absl::StrCat(".", name);
  return absl::EndsWith(module, dotted) || absl::StartsWith(module, absl::StrCat(name, ".")) ||
         absl::StrContains(module, absl::StrCat(dotted, "."));
}

bool MatchesPattern(const std::string& pattern, const std::string& module) {
  if (absl::StartsWith(pattern, kRegexPrefix)) {
    // compressed-tensors matches with Python's re.match: anchored at the start only. The regex was
    // compiled once when the config was parsed, so it cannot throw here.
    const std::regex re(pattern.substr(sizeof(kRegexPrefix) - 1));
    return std::regex_search(module, re, std::regex_constants::match_continuous);
  }
  if (absl::StartsWith(pattern, kGlobPrefix)) {
    const std::string glob = pattern.substr(sizeof(kGlobPrefix) - 1);
    return fnmatch(glob.c_str(), module.c_str(), 0) == 0 || MatchesName(glob, module);
  }
  return MatchesName(pattern, module);
}

absl::Status CheckRegex(const JsonObjectReader& r, std::string_view key, const std::string& pattern) {
  if (!absl::StartsWith(pattern, kRegexPrefix)) return absl::OkStatus();
  try {
    std::regex re(pattern.substr(sizeof(kRegexPrefix) - 1));
  } catch (const std::regex_error& e) {
    return r.KeyError(key, absl::StrCat("has an invalid regular expression '", pattern, "': ", e.what()));
  }
  return absl::OkStatus();
}

// A list of strings (absent or null: empty), each prefixed with `prefix`.
absl::StatusOr<std::vector<std::string>> StringList(const JsonObjectReader& r, std::string_view key,
                                                    const std::string& prefix = "") {
  std::vector<std::string> out;
  const nlohmann::json* v = r.Find(key);
  if (v == nullptr) return out;
  if (!v->is_array()) return r.KeyError(key, absl::StrCat("must be a list of strings, got ", DescribeJson(*v)));
  for (const nlohmann::json& item : *v) {
    if (!item.is_string()) return r.KeyError(key, absl::StrCat("must hold strings, got ", DescribeJson(item)));
    out.push_back(absl::StrCat(prefix, item.get<std::string>()));
    RETURN_IF_ERROR(CheckRegex(r, key, out.back()));
  }
  return out;
}

absl::StatusOr<std::string> LowerString(const JsonObjectReader& r, std::string_view key, std::string fallback) {
  ASSIGN_OR_RETURN(std::optional<std::string> v, r.OptionalString(key));
  return absl::AsciiStrToLower(v.value_or(fallback));
}

absl::Status Unsupported(const JsonObjectReader& r, std::string_view key, const std::string& what) {
  return absl::UnimplementedError(absl::StrCat(r.source(), ": key '", r.KeyPath(key), "' ", what));
}

// --- quant_method "fp8": transformers' FP8 (128x128 blocks) and AutoFP8 (per tensor) ---

absl::Status ParseFp8(const JsonObjectReader& r, QuantizationConfig* q) {
  ASSIGN_OR_RETURN(std::string act, LowerString(r, "activation_scheme", "dynamic"));
  if (act != "dynamic" && act != "static")
    return Unsupported(r, "activation_scheme", absl::StrCat("is '", act, "'; expected 'dynamic' or 'static'"));
  LinearScheme s;
  s.fp8 = true;
  if (const nlohmann::json* block = r.Find("weight_block_size")) {
    const bool pair = block->is_array() && block->size() == 2 && JsonToInt64((*block)[0]) && JsonToInt64((*block)[1]);
    if (!pair) return r.KeyError("weight_block_size", absl::StrCat("must be [rows, cols], got ", DescribeJson(*block)));
    if (*JsonToInt64((*block)[0]) != kBlock || *JsonToInt64((*block)[1]) != kBlock)
      return Unsupported(r, "weight_block_size",
                         absl::StrCat("is ", block->dump(), ": only [128, 128] blocks are supported (the FP8 kernels "
                                      "and the DeepSeek-V3 / Qwen3-FP8 layout)"));
    if (act != "dynamic")
      return Unsupported(r, "activation_scheme", "is 'static' with weight_block_size: block-scaled checkpoints "
                                                 "quantize activations dynamically");
    s.weight_scales = ScaleGranularity::kBlock;
    s.block_rows = s.block_cols = kBlock;
    s.scale_name = "weight_scale_inv";
    s.activation = ActivationQuant::kDynamicPerGroup;
    s.activation_group = kBlock;
    s.description = absl::StrCat(q->source, " (fp8, 128x128 weight blocks, dynamic activations per 128 columns)");
  } else {
    s.weight_scales = ScaleGranularity::kTensor;
    s.activation = act == "static" ? ActivationQuant::kStaticPerTensor : ActivationQuant::kDynamicPerToken;
    s.description = absl::StrCat(q->source, " (fp8, per-tensor weights, ", act, " activations)");
  }
  q->groups.push_back({"fp8", {"Linear"}, s});
  ASSIGN_OR_RETURN(q->ignore, StringList(r, "ignored_layers"));
  ASSIGN_OR_RETURN(std::vector<std::string> not_converted, StringList(r, "modules_to_not_convert"));
  q->ignore.insert(q->ignore.end(), not_converted.begin(), not_converted.end());
  return absl::OkStatus();
}

// --- compressed-tensors, format float-quantized ---

absl::Status CheckFormat(const JsonObjectReader& r, std::string_view key, const std::string& format) {
  if (format == "float-quantized") return absl::OkStatus();
  if (format == "pack-quantized" || format == "nvfp4-pack-quantized" || format == "marlin-24")
    return Unsupported(r, key, absl::StrCat("is '", format, "': 4-bit weights are not supported yet"));
  if (format == "naive-quantized" || format == "int-quantized")
    return Unsupported(r, key, absl::StrCat("is '", format, "': integer weights are not supported (FP8 only)"));
  return Unsupported(r, key, absl::StrCat("is '", format, "'; only 'float-quantized' (FP8) is supported"));
}

absl::Status CheckBitsAndType(const JsonObjectReader& r, const std::string& what) {
  ASSIGN_OR_RETURN(std::optional<int64_t> bits, r.OptionalInt("num_bits"));
  ASSIGN_OR_RETURN(std::string type, LowerString(r, "type", "float"));
  if (bits.value_or(8) == 4) return Unsupported(r, "num_bits", absl::StrCat("is 4: 4-bit ", what, " are not supported yet"));
  if (bits.value_or(8) != 8) return Unsupported(r, "num_bits", absl::StrCat("is ", *bits, "; only 8-bit FP8 ", what));
  if (type != "float")
    return Unsupported(r, "type", absl::StrCat("is '", type, "'; only float (FP8 E4M3) ", what, " are supported"));
  return absl::OkStatus();
}

absl::StatusOr<int64_t> GroupSize(const JsonObjectReader& r) {
  ASSIGN_OR_RETURN(std::optional<int64_t> g, r.OptionalInt("group_size"));
  if (g.value_or(0) != kBlock)
    return Unsupported(r, "group_size", absl::StrCat("is ", g ? absl::StrCat(*g) : "missing",
                                                     "; only groups of 128 columns are supported"));
  return *g;
}

absl::Status ParseCtWeights(const JsonObjectReader& w, LinearScheme* s) {
  RETURN_IF_ERROR(CheckBitsAndType(w, "weights"));
  ASSIGN_OR_RETURN(std::optional<bool> symmetric, w.OptionalBool("symmetric"));
  if (!symmetric.value_or(true)) return Unsupported(w, "symmetric", "is false: asymmetric FP8 weights are not supported");
  ASSIGN_OR_RETURN(std::optional<bool> dynamic, w.OptionalBool("dynamic"));
  if (dynamic.value_or(false)) return Unsupported(w, "dynamic", "is true: weights must carry static scales");
  ASSIGN_OR_RETURN(std::string strategy, LowerString(w, "strategy", "tensor"));
  s->fp8 = true;
  if (strategy == "tensor") {
    s->weight_scales = ScaleGranularity::kTensor;
  } else if (strategy == "channel") {
    s->weight_scales = ScaleGranularity::kChannel;
  } else if (strategy == "block") {
    const nlohmann::json* b = w.Find("block_structure");
    const bool ok = b && b->is_array() && b->size() == 2 && JsonToInt64((*b)[0]).value_or(0) == kBlock &&
                    JsonToInt64((*b)[1]).value_or(0) == kBlock;
    if (!ok)
      return Unsupported(w, "block_structure", absl::StrCat("is ", b ? b->dump() : "missing",
                                                            ": only 128x128 weight blocks are supported"));
    s->weight_scales = ScaleGranularity::kBlock;
    s->block_rows = s->block_cols = kBlock;
  } else if (strategy == "group") {
    ASSIGN_OR_RETURN(int64_t g, GroupSize(w));
    s->weight_scales = ScaleGranularity::kGroup;
    s->block_cols = static_cast<int32_t>(g);
  } else {
    return Unsupported(w, "strategy", absl::StrCat("is '", strategy, "', an unknown or unsupported weight strategy "
                                                                    "(supported: tensor, channel, block, group)"));
  }
  return absl::OkStatus();
}

absl::Status ParseCtInputs(const JsonObjectReader& a, LinearScheme* s) {
  RETURN_IF_ERROR(CheckBitsAndType(a, "activations"));
  ASSIGN_OR_RETURN(std::string strategy, LowerString(a, "strategy", "tensor"));
  ASSIGN_OR_RETURN(std::optional<bool> dynamic, a.OptionalBool("dynamic"));
  const bool dyn = dynamic.value_or(false);
  if (strategy == "token" && dyn) {
    s->activation = ActivationQuant::kDynamicPerToken;
  } else if (strategy == "tensor" && !dyn) {
    s->activation = ActivationQuant::kStaticPerTensor;
  } else if (strategy == "tensor" && dyn) {
    // One scale per tensor computed at run time needs a reduction across rows before the GEMM;
    // per-token scales are finer and never less accurate, so they stand in for it.
    s->activation = ActivationQuant::kDynamicPerToken;
  } else if (strategy == "group" && dyn) {
    ASSIGN_OR_RETURN(int64_t g, GroupSize(a));
    s->activation = ActivationQuant::kDynamicPerGroup;
    s->activation_group = static_cast<int32_t>(g);
  } else {
    return Unsupported(a, "strategy", absl::StrCat("is '", strategy, "' with dynamic ", dyn ? "true" : "false",
                                                   ", an unknown or unsupported activation strategy (supported: "
                                                   "dynamic token, static tensor, dynamic group of 128)"));
  }
  return absl::OkStatus();
}

absl::Status ParseCompressedTensors(const JsonObjectReader& r, QuantizationConfig* q) {
  ASSIGN_OR_RETURN(std::optional<std::string> format, r.OptionalString("format"));
  ASSIGN_OR_RETURN(std::optional<JsonObjectReader> groups, r.OptionalObject("config_groups"));
  if (groups) {
    for (const auto& [name, value] : groups->value().items()) {
      ASSIGN_OR_RETURN(JsonObjectReader g, JsonObjectReader::Create(value, r.source(), groups->KeyPath(name)));
      ASSIGN_OR_RETURN(std::optional<std::string> group_format, g.OptionalString("format"));
      if (group_format) {
        RETURN_IF_ERROR(CheckFormat(g, "format", absl::AsciiStrToLower(*group_format)));
      } else {
        if (!format) return r.KeyError("format", "is missing (required: 'float-quantized')");
        RETURN_IF_ERROR(CheckFormat(r, "format", absl::AsciiStrToLower(*format)));
      }
      QuantizationConfig::Group group;
      group.name = name;
      ASSIGN_OR_RETURN(group.targets, StringList(g, "targets"));
      if (group.targets.empty()) return g.KeyError("targets", "must list the modules the group quantizes");
      ASSIGN_OR_RETURN(std::optional<JsonObjectReader> weights, g.OptionalObject("weights"));
      if (!weights) return Unsupported(g, "weights", "is missing: activation-only quantization is not supported");
      RETURN_IF_ERROR(ParseCtWeights(*weights, &group.scheme));
      ASSIGN_OR_RETURN(std::optional<JsonObjectReader> inputs, g.OptionalObject("input_activations"));
      if (inputs) RETURN_IF_ERROR(ParseCtInputs(*inputs, &group.scheme));
      if (g.Find("output_activations") != nullptr)
        return Unsupported(g, "output_activations", "is set: output quantization is not supported");
      group.scheme.description =
          absl::StrCat(r.source(), " compressed-tensors ", groups->KeyPath(name), " (weights ",
                       std::string(ScaleGranularityName(group.scheme.weight_scales)), ", activations ",
                       std::string(ActivationQuantName(group.scheme.activation)), ")");
      q->groups.push_back(std::move(group));
    }
  }
  ASSIGN_OR_RETURN(q->ignore, StringList(r, "ignore"));
  ASSIGN_OR_RETURN(std::optional<JsonObjectReader> kv, r.OptionalObject("kv_cache_scheme"));
  if (kv) {
    RETURN_IF_ERROR(CheckBitsAndType(*kv, "KV caches"));
    ASSIGN_OR_RETURN(std::string strategy, LowerString(*kv, "strategy", "tensor"));
    ASSIGN_OR_RETURN(std::optional<bool> dynamic, kv->OptionalBool("dynamic"));
    if (strategy != "tensor" || dynamic.value_or(false))
      return Unsupported(*kv, "strategy", absl::StrCat("is '", strategy, "'", dynamic.value_or(false) ? " (dynamic)" : "",
                                                       ": only static per-tensor KV cache scales are supported"));
    q->kv_cache_fp8 = true;
  }
  return absl::OkStatus();
}

// --- NVIDIA ModelOpt ---

absl::Status ParseModelOpt(const JsonObjectReader& top, QuantizationConfig* q) {
  // hf_quant_config.json nests the keys in "quantization"; config.json has them flat.
  ASSIGN_OR_RETURN(std::optional<JsonObjectReader> nested, top.OptionalObject("quantization"));
  const JsonObjectReader& r = nested ? *nested : top;
  ASSIGN_OR_RETURN(std::optional<std::string> algo, r.OptionalString("quant_algo"));
  const std::string a = absl::AsciiStrToUpper(algo.value_or(""));
  LinearScheme s;
  s.fp8 = true;
  if (a == "FP8") {
    s.weight_scales = ScaleGranularity::kTensor;
    s.activation = ActivationQuant::kStaticPerTensor;
  } else if (a == "FP8_PER_CHANNEL_PER_TOKEN") {
    s.weight_scales = ScaleGranularity::kChannel;
    s.activation = ActivationQuant::kDynamicPerToken;
  } else if (!a.empty() && a != "NONE") {
    return Unsupported(r, "quant_algo", absl::StrCat("is '", *algo, "'; only 'FP8' and 'FP8_PER_CHANNEL_PER_TOKEN' are "
                                                                   "supported (4-bit and integer schemes are not)"));
  }
  if (s.weight_scales != ScaleGranularity::kNone) {
    s.description = absl::StrCat(q->source, " (ModelOpt ", a, ")");
    q->groups.push_back({"modelopt", {"Linear"}, s});
  }
  ASSIGN_OR_RETURN(q->ignore, StringList(r, "exclude_modules", kGlobPrefix));
  ASSIGN_OR_RETURN(std::optional<std::string> kv, r.OptionalString("kv_cache_quant_algo"));
  const std::string k = absl::AsciiStrToUpper(kv.value_or(""));
  if (k == "FP8") {
    q->kv_cache_fp8 = true;
  } else if (!k.empty() && k != "NONE") {
    return Unsupported(r, "kv_cache_quant_algo", absl::StrCat("is '", *kv, "'; only 'FP8' is supported"));
  }
  return absl::OkStatus();
}

}  // namespace

std::string_view QuantMethodName(QuantMethod m) {
  switch (m) {
    case QuantMethod::kNone: return "none";
    case QuantMethod::kFp8: return "fp8";
    case QuantMethod::kCompressedTensors: return "compressed-tensors";
    case QuantMethod::kModelOpt: return "modelopt";
  }
  return "unknown";
}

StorageFormat LinearScheme::format() const {
  if (!fp8) return StorageFormat::Float(DType::kF32);
  return StorageFormat::Fp8(weight_scales, block_rows, block_cols);
}

LinearScheme QuantizationConfig::SchemeFor(std::string_view module_name) const {
  const std::string module(module_name);
  LinearScheme unquantized;  // described only when a config left it so
  if (method != QuantMethod::kNone) unquantized.description = absl::StrCat(source, " (", module, " left unquantized)");
  if (method == QuantMethod::kNone) return unquantized;
  for (const std::string& pattern : ignore)
    if (MatchesPattern(pattern, module)) return unquantized;
  for (const Group& g : groups)
    for (const std::string& target : g.targets)
      if (target == "Linear" || MatchesPattern(target, module)) return g.scheme;
  return unquantized;
}

absl::StatusOr<QuantizationConfig> ParseQuantizationConfig(const nlohmann::json& value, const std::string& source,
                                                           const std::string& key_path, QuantMethod method_hint) {
  ASSIGN_OR_RETURN(JsonObjectReader r, JsonObjectReader::Create(value, source, key_path));
  QuantizationConfig q;
  q.source = key_path.empty() ? source : absl::StrCat(source, " ", key_path);
  ASSIGN_OR_RETURN(std::string method,
                   LowerString(r, "quant_method", std::string(method_hint == QuantMethod::kModelOpt ? "modelopt" : "")));
  try {
    if (method == "fp8") {
      q.method = QuantMethod::kFp8;
      RETURN_IF_ERROR(ParseFp8(r, &q));
    } else if (method == "compressed-tensors") {
      q.method = QuantMethod::kCompressedTensors;
      RETURN_IF_ERROR(ParseCompressedTensors(r, &q));
    } else if (method == "modelopt") {
      q.method = QuantMethod::kModelOpt;
      RETURN_IF_ERROR(ParseModelOpt(r, &q));
    } else if (method.empty()) {
      return r.KeyError("quant_method", "is missing");
    } else {
      return Unsupported(r, "quant_method", absl::StrCat("is '", method, "', which is not supported (", kSupported, ")"));
    }
  } catch (const nlohmann::json::exception& e) {
    return absl::InternalError(absl::StrCat(source, ": unexpected JSON error: ", e.what()));
  }
  return q;
}

}  // namespace llm
