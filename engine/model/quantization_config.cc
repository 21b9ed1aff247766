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
    "supported: quant_method 'fp8' (128x128 blocks or per-tensor), 'compressed-tensors' (float-quantized FP8, "
    "pack-quantized 4-bit integers), 'modelopt' (FP8), 'awq' (4-bit GEMM) and 'gptq' (4-bit)";

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

constexpr char kPackQuantized[] = "pack-quantized";

absl::Status CheckFormat(const JsonObjectReader& r, std::string_view key, const std::string& format) {
  if (format == "float-quantized" || format == kPackQuantized) return absl::OkStatus();
  if (format == "nvfp4-pack-quantized" || format == "mxfp4-pack-quantized")
    return Unsupported(r, key, absl::StrCat("is '", format, "': 4-bit float weights are not supported"));
  if (format == "marlin-24")
    return Unsupported(r, key, absl::StrCat("is '", format, "': 2:4-sparse weights are not supported"));
  if (format == "naive-quantized" || format == "int-quantized")
    return Unsupported(r, key, absl::StrCat("is '", format, "': unpacked integer weights are not supported "
                                                            "(FP8 'float-quantized' and 4-bit 'pack-quantized' are)"));
  return Unsupported(r, key, absl::StrCat("is '", format, "'; only 'float-quantized' (FP8) and 'pack-quantized' "
                                                          "(4-bit integers) are supported"));
}

absl::Status CheckBitsAndType(const JsonObjectReader& r, const std::string& what) {
  ASSIGN_OR_RETURN(std::optional<int64_t> bits, r.OptionalInt("num_bits"));
  ASSIGN_OR_RETURN(std::string type, LowerString(r, "type", "float"));
  if (bits.value_or(8) == 4)
    return Unsupported(r, "num_bits", absl::StrCat("is 4: 4-bit ", what, " are supported only as integer weights "
                                                   "in the 'pack-quantized' format"));
  if (bits.value_or(8) != 8) return Unsupported(r, "num_bits", absl::StrCat("is ", *bits, "; only 8-bit FP8 ", what));
  if (type != "float")
    return Unsupported(r, "type", absl::StrCat("is '", type, "'; only float (FP8 E4M3) ", what, " are supported"));
  return absl::OkStatus();
}

// A group size of 4-bit weights: a positive number of columns, or -1 (one group: all of K), as 0.
absl::StatusOr<int64_t> Int4GroupSize(const JsonObjectReader& r, std::string_view key, bool required) {
  ASSIGN_OR_RETURN(std::optional<int64_t> g, r.OptionalInt(key));
  if (!g) {
    if (required) return r.KeyError(key, "is missing");
    return 0;
  }
  if (*g == -1) return 0;
  if (*g <= 0 || *g % 8 != 0)
    return Unsupported(r, key, absl::StrCat("is ", *g, "; 4-bit groups must be -1 (one group) or a positive "
                                                       "multiple of 8 columns"));
  return *g;
}

std::string GroupText(int64_t g) { return g > 0 ? absl::StrCat("group_size ", g) : std::string("one group"); }

// compressed-tensors "pack-quantized" weights: 4-bit integers, per group or per channel.
absl::Status ParseCtInt4Weights(const JsonObjectReader& w, LinearScheme* s) {
  ASSIGN_OR_RETURN(std::optional<int64_t> bits, w.OptionalInt("num_bits"));
  ASSIGN_OR_RETURN(std::string type, LowerString(w, "type", "int"));
  if (type != "int")
    return Unsupported(w, "type", absl::StrCat("is '", type, "'; pack-quantized weights must be integers"));
  if (bits.value_or(0) != 4)
    return Unsupported(w, "num_bits", absl::StrCat("is ", bits ? absl::StrCat(*bits) : "missing",
                                                   "; only 4-bit pack-quantized weights are supported"));
  ASSIGN_OR_RETURN(std::optional<bool> dynamic, w.OptionalBool("dynamic"));
  if (dynamic.value_or(false)) return Unsupported(w, "dynamic", "is true: weights must carry static scales");
  ASSIGN_OR_RETURN(std::string strategy, LowerString(w, "strategy", "group"));
  if (strategy == "group") {
    ASSIGN_OR_RETURN(s->group_size, Int4GroupSize(w, "group_size", /*required=*/true));
  } else if (strategy == "channel") {
    s->group_size = 0;
  } else {
    return Unsupported(w, "strategy", absl::StrCat("is '", strategy, "'; 4-bit weights take 'group' or 'channel'"));
  }
  ASSIGN_OR_RETURN(std::optional<bool> symmetric, w.OptionalBool("symmetric"));
  s->zero_points = !symmetric.value_or(true);
  ASSIGN_OR_RETURN(std::string actorder, LowerString(w, "actorder", ""));
  if (actorder == "group" || actorder == "dynamic") {
    if (strategy != "group") return Unsupported(w, "actorder", "is 'group' without group quantization");
    s->act_order = true;  // weight_g_idx maps columns to groups
  } else if (!actorder.empty() && actorder != "weight" && actorder != "static") {
    // "weight" / "static" only changed the calibration order: the groups stay in column order.
    return Unsupported(w, "actorder", absl::StrCat("is '", actorder, "'; expected group, weight or null"));
  }
  s->int4 = Int4Packing::kCompressedTensors;
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
      std::string group_packing;
      if (group_format) {
        group_packing = absl::AsciiStrToLower(*group_format);
        RETURN_IF_ERROR(CheckFormat(g, "format", group_packing));
      } else {
        if (!format) return r.KeyError("format", "is missing (required: 'float-quantized' or 'pack-quantized')");
        group_packing = absl::AsciiStrToLower(*format);
        RETURN_IF_ERROR(CheckFormat(r, "format", group_packing));
      }
      QuantizationConfig::Group group;
      group.name = name;
      ASSIGN_OR_RETURN(group.targets, StringList(g, "targets"));
      if (group.targets.empty()) return g.KeyError("targets", "must list the modules the group quantizes");
      ASSIGN_OR_RETURN(std::optional<JsonObjectReader> weights, g.OptionalObject("weights"));
      if (!weights) return Unsupported(g, "weights", "is missing: activation-only quantization is not supported");
      ASSIGN_OR_RETURN(std::optional<JsonObjectReader> inputs, g.OptionalObject("input_activations"));
      if (group_packing == kPackQuantized) {
        RETURN_IF_ERROR(ParseCtInt4Weights(*weights, &group.scheme));
        if (inputs)
          return Unsupported(g, "input_activations", "is set: 4-bit weights take 16-bit activations only (W4A16)");
      } else {
        RETURN_IF_ERROR(ParseCtWeights(*weights, &group.scheme));
        if (inputs) RETURN_IF_ERROR(ParseCtInputs(*inputs, &group.scheme));
      }
      if (g.Find("output_activations") != nullptr)
        return Unsupported(g, "output_activations", "is set: output quantization is not supported");
      const LinearScheme& sc = group.scheme;
      group.scheme.description =
          sc.int4 != Int4Packing::kNone
              ? absl::StrCat(r.source(), " compressed-tensors ", groups->KeyPath(name), " (pack-quantized 4-bit, ",
                             GroupText(sc.group_size), sc.zero_points ? ", asymmetric" : ", symmetric",
                             sc.act_order ? ", actorder group" : "", ")")
              : absl::StrCat(r.source(), " compressed-tensors ", groups->KeyPath(name), " (weights ",
                             std::string(ScaleGranularityName(sc.weight_scales)), ", activations ",
                             std::string(ActivationQuantName(sc.activation)), ")");
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

// --- AutoAWQ (quant_method "awq") ---

// transformers' AwqConfig / AutoAWQ's quant_config: bits (AutoAWQ: w_bit), group_size
// (q_group_size), zero_point, version, modules_to_not_convert.
absl::Status ParseAwq(const JsonObjectReader& r, QuantizationConfig* q) {
  ASSIGN_OR_RETURN(std::optional<int64_t> bits, r.OptionalInt("bits"));
  if (!bits) {
    ASSIGN_OR_RETURN(bits, r.OptionalInt("w_bit"));
  }
  if (bits.value_or(0) != 4)
    return Unsupported(r, "bits", absl::StrCat("is ", bits ? absl::StrCat(*bits) : "missing",
                                               "; only 4-bit AWQ weights are supported"));
  ASSIGN_OR_RETURN(std::string version, LowerString(r, "version", "gemm"));
  if (version != "gemm")
    return Unsupported(r, "version", absl::StrCat("is '", version, "'; only AutoAWQ's 'gemm' packing is supported "
                                                                   "(gemv, gemv_fast, marlin, exllama and ipex are not)"));
  ASSIGN_OR_RETURN(std::optional<bool> zero_point, r.OptionalBool("zero_point"));
  if (!zero_point.value_or(true))
    return Unsupported(r, "zero_point", "is false: AutoAWQ's GEMM packing stores zero points (zero_point true)");
  LinearScheme s;
  s.int4 = Int4Packing::kAwqGemm;
  s.zero_points = true;
  const char* group_key = r.Find("group_size") ? "group_size" : "q_group_size";
  ASSIGN_OR_RETURN(s.group_size, Int4GroupSize(r, group_key, /*required=*/true));
  s.description = absl::StrCat(q->source, " (AutoAWQ GEMM 4-bit, ", GroupText(s.group_size), ")");
  q->groups.push_back({"awq", {"Linear"}, s});
  ASSIGN_OR_RETURN(q->ignore, StringList(r, "modules_to_not_convert"));
  return absl::OkStatus();
}

// --- GPTQ (quant_method "gptq": AutoGPTQ, GPTQModel, optimum) ---

absl::Status ParseGptq(const JsonObjectReader& r, QuantizationConfig* q) {
  ASSIGN_OR_RETURN(std::optional<int64_t> bits, r.OptionalInt("bits"));
  if (bits.value_or(0) != 4)
    return Unsupported(r, "bits", absl::StrCat("is ", bits ? absl::StrCat(*bits) : "missing",
                                               "; only 4-bit GPTQ weights are supported"));
  LinearScheme s;
  s.int4 = Int4Packing::kGptq;
  s.zero_points = true;  // GPTQ stores zeros even when symmetric (8); the loader drops all-8 ones
  ASSIGN_OR_RETURN(s.group_size, Int4GroupSize(r, "group_size", /*required=*/true));
  ASSIGN_OR_RETURN(std::optional<bool> desc_act, r.OptionalBool("desc_act"));
  s.act_order = desc_act.value_or(false);
  ASSIGN_OR_RETURN(std::optional<bool> sym, r.OptionalBool("sym"));
  // AutoGPTQ writes checkpoint_format, GPTQModel both checkpoint_format and format; older
  // checkpoints have neither (v1).
  const char* format_key = r.Find("checkpoint_format") ? "checkpoint_format" : "format";
  ASSIGN_OR_RETURN(std::string format, LowerString(r, format_key, "gptq"));
  if (format == "gptq") {
    s.zeros_minus_one = true;
  } else if (format != "gptq_v2") {
    return Unsupported(r, format_key, absl::StrCat("is '", format, "'; only 'gptq' (v1) and 'gptq_v2' packings are "
                                                                   "supported"));
  }
  ASSIGN_OR_RETURN(std::optional<bool> marlin, r.OptionalBool("is_marlin_format"));
  if (marlin.value_or(false)) return Unsupported(r, "is_marlin_format", "is true: Marlin-packed GPTQ is not supported");
  ASSIGN_OR_RETURN(std::optional<std::string> pack_dtype, r.OptionalString("pack_dtype"));
  if (pack_dtype && absl::AsciiStrToLower(*pack_dtype) != "int32")
    return Unsupported(r, "pack_dtype", absl::StrCat("is '", *pack_dtype, "'; only int32 words are supported"));
  ASSIGN_OR_RETURN(std::optional<bool> lm_head, r.OptionalBool("lm_head"));
  if (lm_head.value_or(false))
    return Unsupported(r, "lm_head", "is true: a quantized LM head is not supported (it stays in 16 bits)");
  if (const nlohmann::json* dynamic = r.Find("dynamic"); dynamic != nullptr && !dynamic->empty())
    return Unsupported(r, "dynamic", "sets per-module overrides, which are not supported");
  ASSIGN_OR_RETURN(std::optional<bool> static_groups, r.OptionalBool("static_groups"));
  (void)static_groups;  // only changes which groups g_idx names, which the loader reads anyway
  s.description = absl::StrCat(q->source, " (GPTQ ", s.zeros_minus_one ? "v1" : "v2", " 4-bit, ",
                               GroupText(s.group_size), s.act_order ? ", desc_act" : "",
                               sym.value_or(true) ? ", sym" : ", asym", ")");
  q->groups.push_back({"gptq", {"Linear"}, s});
  ASSIGN_OR_RETURN(q->ignore, StringList(r, "modules_to_not_convert"));
  return absl::OkStatus();
}

}  // namespace

std::string_view Int4PackingName(Int4Packing p) {
  switch (p) {
    case Int4Packing::kNone: return "none";
    case Int4Packing::kAwqGemm: return "AutoAWQ GEMM";
    case Int4Packing::kGptq: return "GPTQ";
    case Int4Packing::kCompressedTensors: return "compressed-tensors pack-quantized";
  }
  return "unknown";
}

bool LinearScheme::SameStorage(const LinearScheme& o) const {
  return fp8 == o.fp8 && weight_scales == o.weight_scales && block_cols == o.block_cols &&
         activation == o.activation && scale_name == o.scale_name && int4 == o.int4 &&
         group_size == o.group_size && zero_points == o.zero_points && zeros_minus_one == o.zeros_minus_one &&
         act_order == o.act_order;
}

std::string_view QuantMethodName(QuantMethod m) {
  switch (m) {
    case QuantMethod::kNone: return "none";
    case QuantMethod::kFp8: return "fp8";
    case QuantMethod::kCompressedTensors: return "compressed-tensors";
    case QuantMethod::kModelOpt: return "modelopt";
    case QuantMethod::kAwq: return "awq";
    case QuantMethod::kGptq: return "gptq";
  }
  return "unknown";
}

StorageFormat LinearScheme::format() const {
  if (int4 != Int4Packing::kNone) return StorageFormat::Int4(zero_points, DType::kF32);
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
    } else if (method == "awq") {
      q.method = QuantMethod::kAwq;
      RETURN_IF_ERROR(ParseAwq(r, &q));
    } else if (method == "gptq") {
      q.method = QuantMethod::kGptq;
      RETURN_IF_ERROR(ParseGptq(r, &q));
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
