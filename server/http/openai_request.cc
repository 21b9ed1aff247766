#include "server/http/openai_request.h"

#include <cmath>
#include <functional>
#include <limits>
#include <map>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "kernels/core/status.h"
#include "nlohmann/json.hpp"
#include "server/grpc/proto_conversion.h"

namespace llm::server {
namespace {

using Json = nlohmann::ordered_json;

absl::Status Bad(auto&&... parts) { return absl::InvalidArgumentError(absl::StrCat(parts...)); }

absl::StatusOr<Json> ParseBody(std::string_view body) {
  if (absl::Status s = CheckUtf8(body, "the request body"); !s.ok()) return s;
  Json json = Json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded()) return Bad("the request body is not valid JSON");
  if (!json.is_object()) return Bad("the request body must be a JSON object");
  return json;
}

// Typed reads of one field, with messages naming it.
absl::StatusOr<double> Number(const Json& v, const std::string& key) {
  if (!v.is_number()) return Bad("'", key, "' must be a number");
  const double d = v.get<double>();
  if (!std::isfinite(d)) return Bad("'", key, "' must be finite");
  return d;
}

absl::StatusOr<int64_t> Integer(const Json& v, const std::string& key) {
  if (v.is_number_integer()) return v.get<int64_t>();
  // 16.0 is an integer to JavaScript clients.
  if (v.is_number_float() && std::isfinite(v.get<double>()) && v.get<double>() == std::floor(v.get<double>()) &&
      std::fabs(v.get<double>()) < 9e15)
    return static_cast<int64_t>(v.get<double>());
  return Bad("'", key, "' must be an integer");
}

absl::StatusOr<int32_t> Int32(const Json& v, const std::string& key) {
  ASSIGN_OR_RETURN(int64_t i, Integer(v, key));
  if (i < std::numeric_limits<int32_t>::min() || i > std::numeric_limits<int32_t>::max())
    return Bad("'", key, "' is out of range");
  return static_cast<int32_t>(i);
}

absl::StatusOr<bool> Bool(const Json& v, const std::string& key) {
  if (!v.is_boolean()) return Bad("'", key, "' must be true or false");
  return v.get<bool>();
}

absl::StatusOr<std::string> String(const Json& v, const std::string& key) {
  if (!v.is_string()) return Bad("'", key, "' must be a string");
  return v.get<std::string>();
}

absl::StatusOr<std::vector<int32_t>> IdList(const Json& v, const std::string& key) {
  if (!v.is_array()) return Bad("'", key, "' must be an array of token ids");
  std::vector<int32_t> ids;
  for (const Json& e : v) {
    ASSIGN_OR_RETURN(int32_t id, Int32(e, key));
    ids.push_back(id);
  }
  return ids;
}

// A field this server does not implement: accepted only holding its "not used" value.
absl::Status Unsupported(const Json& v, const std::string& key, const std::string& why) {
  const bool unused = v.is_null() || (v.is_boolean() && !v.get<bool>()) || (v.is_array() && v.empty()) ||
                      (v.is_object() && v.empty());
  if (unused) return absl::OkStatus();
  return Bad("'", key, "' is not supported by this server: ", why);
}

using FieldParser = std::function<absl::Status(const Json& value, OpenAiRequest& out, v1::GenerateRequest& r)>;

absl::Status SetStop(const Json& v, v1::GenerateRequest& r) {
  auto add = [&](const Json& s) -> absl::Status {
    ASSIGN_OR_RETURN(std::string text, String(s, "stop"));
    if (text.empty()) return Bad("'stop' strings must not be empty");
    r.mutable_stopping()->add_stop(text);
    return absl::OkStatus();
  };
  if (v.is_string()) return add(v);
  if (!v.is_array()) return Bad("'stop' must be a string or an array of strings");
  if (v.size() > 16) return Bad("'stop' has ", v.size(), " strings; at most 16 are allowed");
  for (const Json& s : v) RETURN_IF_ERROR(add(s));
  return absl::OkStatus();
}

// The fields both endpoints take. Every parser ignores null (the SDKs' "not given").
std::map<std::string, FieldParser, std::less<>> CommonFields() {
  std::map<std::string, FieldParser, std::less<>> f;
  f["model"] = [](const Json& v, OpenAiRequest& o, v1::GenerateRequest&) -> absl::Status {
    ASSIGN_OR_RETURN(o.model, String(v, "model"));
    return absl::OkStatus();
  };
  f["max_tokens"] = [](const Json& v, OpenAiRequest& o, v1::GenerateRequest& r) -> absl::Status {
    ASSIGN_OR_RETURN(int32_t n, Int32(v, "max_tokens"));
    if (n < 1) return Bad("'max_tokens' must be at least 1, got ", n);
    r.mutable_stopping()->set_max_tokens(n);
    o.max_tokens_set = true;
    return absl::OkStatus();
  };
  f["temperature"] = [](const Json& v, OpenAiRequest&, v1::GenerateRequest& r) -> absl::Status {
    ASSIGN_OR_RETURN(double t, Number(v, "temperature"));
    r.mutable_sampling()->set_temperature(static_cast<float>(t));
    return absl::OkStatus();
  };
  f["top_p"] = [](const Json& v, OpenAiRequest&, v1::GenerateRequest& r) -> absl::Status {
    ASSIGN_OR_RETURN(double p, Number(v, "top_p"));
    r.mutable_sampling()->set_top_p(static_cast<float>(p));
    return absl::OkStatus();
  };
  f["n"] = [](const Json& v, OpenAiRequest& o, v1::GenerateRequest&) -> absl::Status {
    ASSIGN_OR_RETURN(int32_t n, Int32(v, "n"));
    if (n < 1 || n > kMaxChoices) return Bad("'n' must be in [1, ", kMaxChoices, "], got ", n);
    o.n = n;
    return absl::OkStatus();
  };
  f["stream"] = [](const Json& v, OpenAiRequest& o, v1::GenerateRequest&) -> absl::Status {
    ASSIGN_OR_RETURN(o.stream, Bool(v, "stream"));
    return absl::OkStatus();
  };
  f["stream_options"] = [](const Json& v, OpenAiRequest& o, v1::GenerateRequest&) -> absl::Status {
    if (!v.is_object()) return Bad("'stream_options' must be an object");
    for (const auto& [key, value] : v.items()) {
      if (key == "include_usage") {
        if (value.is_null()) continue;
        ASSIGN_OR_RETURN(o.include_usage, Bool(value, "stream_options.include_usage"));
      } else {
        RETURN_IF_ERROR(Unsupported(value, absl::StrCat("stream_options.", key), "only include_usage is"));
      }
    }
    return absl::OkStatus();
  };
  f["stop"] = [](const Json& v, OpenAiRequest&, v1::GenerateRequest& r) { return SetStop(v, r); };
  f["seed"] = [](const Json& v, OpenAiRequest&, v1::GenerateRequest& r) -> absl::Status {
    ASSIGN_OR_RETURN(int64_t seed, Integer(v, "seed"));
    r.mutable_sampling()->set_seed(static_cast<uint64_t>(seed));
    return absl::OkStatus();
  };
  f["presence_penalty"] = [](const Json& v, OpenAiRequest&, v1::GenerateRequest& r) -> absl::Status {
    ASSIGN_OR_RETURN(double p, Number(v, "presence_penalty"));
    r.mutable_sampling()->set_presence_penalty(static_cast<float>(p));
    return absl::OkStatus();
  };
  f["frequency_penalty"] = [](const Json& v, OpenAiRequest&, v1::GenerateRequest& r) -> absl::Status {
    ASSIGN_OR_RETURN(double p, Number(v, "frequency_penalty"));
    r.mutable_sampling()->set_frequency_penalty(static_cast<float>(p));
    return absl::OkStatus();
  };
  // An end-user id for abuse monitoring: it becomes the request id in the server's logs.
  f["user"] = [](const Json& v, OpenAiRequest&, v1::GenerateRequest& r) -> absl::Status {
    ASSIGN_OR_RETURN(std::string user, String(v, "user"));
    if (user.size() > kMaxRequestIdBytes) return Bad("'user' is longer than ", kMaxRequestIdBytes, " bytes");
    r.set_request_id(user);
    return absl::OkStatus();
  };
  // {"token id": bias}: the keys are token ids written as decimal strings (JSON keys are strings).
  f["logit_bias"] = [](const Json& v, OpenAiRequest&, v1::GenerateRequest& r) -> absl::Status {
    if (!v.is_object()) return Bad("'logit_bias' must be an object of token id -> bias");
    auto& biases = *r.mutable_sampling()->mutable_logit_bias();
    for (const auto& [key, value] : v.items()) {
      int32_t token = 0;
      if (!absl::SimpleAtoi(key, &token) || absl::StrCat(token) != key)
        return Bad("'logit_bias' keys must be token ids (decimal integers), got '", key, "'");
      ASSIGN_OR_RETURN(double bias, Number(value, "logit_bias"));
      biases[token] = static_cast<float>(bias);
    }
    return absl::OkStatus();
  };
  // vLLM's extensions.
  f["top_k"] = [](const Json& v, OpenAiRequest&, v1::GenerateRequest& r) -> absl::Status {
    ASSIGN_OR_RETURN(int32_t k, Int32(v, "top_k"));
    r.mutable_sampling()->set_top_k(k);
    return absl::OkStatus();
  };
  f["min_p"] = [](const Json& v, OpenAiRequest&, v1::GenerateRequest& r) -> absl::Status {
    ASSIGN_OR_RETURN(double p, Number(v, "min_p"));
    r.mutable_sampling()->set_min_p(static_cast<float>(p));
    return absl::OkStatus();
  };
  f["repetition_penalty"] = [](const Json& v, OpenAiRequest&, v1::GenerateRequest& r) -> absl::Status {
    ASSIGN_OR_RETURN(double p, Number(v, "repetition_penalty"));
    r.mutable_sampling()->set_repetition_penalty(static_cast<float>(p));
    return absl::OkStatus();
  };
  f["ignore_eos"] = [](const Json& v, OpenAiRequest&, v1::GenerateRequest& r) -> absl::Status {
    ASSIGN_OR_RETURN(bool b, Bool(v, "ignore_eos"));
    r.mutable_stopping()->set_ignore_eos(b);
    return absl::OkStatus();
  };
  f["min_tokens"] = [](const Json& v, OpenAiRequest&, v1::GenerateRequest& r) -> absl::Status {
    ASSIGN_OR_RETURN(int32_t n, Int32(v, "min_tokens"));
    r.mutable_stopping()->set_min_tokens(n);
    return absl::OkStatus();
  };
  f["stop_token_ids"] = [](const Json& v, OpenAiRequest&, v1::GenerateRequest& r) -> absl::Status {
    ASSIGN_OR_RETURN(std::vector<int32_t> ids, IdList(v, "stop_token_ids"));
    r.mutable_stopping()->mutable_stop_token_ids()->Add(ids.begin(), ids.end());
    return absl::OkStatus();
  };
  f["skip_special_tokens"] = [](const Json& v, OpenAiRequest&, v1::GenerateRequest&) -> absl::Status {
    ASSIGN_OR_RETURN(bool skip, Bool(v, "skip_special_tokens"));
    if (!skip) return Bad("'skip_special_tokens': false is not supported: special tokens are always left out of the text");
    return absl::OkStatus();
  };
  f["priority"] = [](const Json& v, OpenAiRequest&, v1::GenerateRequest& r) -> absl::Status {
    ASSIGN_OR_RETURN(int32_t p, Int32(v, "priority"));
    r.set_priority(p);
    return absl::OkStatus();
  };
  // vLLM's cache_salt: requests share cached prompt blocks only with requests of the same salt.
  f["cache_salt"] = [](const Json& v, OpenAiRequest&, v1::GenerateRequest& r) -> absl::Status {
    ASSIGN_OR_RETURN(std::string salt, String(v, "cache_salt"));
    if (salt.size() > 1024) return Bad("'cache_salt' is longer than 1024 bytes");
    r.set_cache_salt(salt);
    return absl::OkStatus();
  };
  f["include_stop_str_in_output"] = [](const Json& v, OpenAiRequest&, v1::GenerateRequest&) {
    return Unsupported(v, "include_stop_str_in_output", "stop strings are always left out of the text");
  };
  f["use_beam_search"] = [](const Json& v, OpenAiRequest&, v1::GenerateRequest&) {
    return Unsupported(v, "use_beam_search", "beam search is not implemented");
  };
  f["truncate_prompt_tokens"] = [](const Json& v, OpenAiRequest&, v1::GenerateRequest&) {
    return Unsupported(v, "truncate_prompt_tokens", "prompts are never truncated");
  };
  f["guided_json"] = f["guided_regex"] = f["guided_choice"] = f["guided_grammar"] =
      [](const Json& v, OpenAiRequest&, v1::GenerateRequest&) {
        return Unsupported(v, "guided decoding", "structured output is not implemented");
      };
  return f;
}

std::map<std::string, FieldParser, std::less<>> CompletionFields() {
  auto f = CommonFields();
  f["prompt"] = [](const Json&, OpenAiRequest&, v1::GenerateRequest&) { return absl::OkStatus(); };  // below
  f["logprobs"] = [](const Json& v, OpenAiRequest& o, v1::GenerateRequest&) -> absl::Status {
    ASSIGN_OR_RETURN(int32_t n, Int32(v, "logprobs"));
    if (n < 0 || n > kMaxTopLogprobs) return Bad("'logprobs' must be in [0, ", kMaxTopLogprobs, "], got ", n);
    o.logprobs = true;
    o.top_logprobs = n;
    return absl::OkStatus();
  };
  f["add_special_tokens"] = [](const Json& v, OpenAiRequest&, v1::GenerateRequest& r) -> absl::Status {
    ASSIGN_OR_RETURN(bool b, Bool(v, "add_special_tokens"));
    r.set_add_special_tokens(b);
    return absl::OkStatus();
  };
  f["echo"] = [](const Json& v, OpenAiRequest&, v1::GenerateRequest&) {
    return Unsupported(v, "echo", "the prompt is not echoed");
  };
  f["suffix"] = [](const Json& v, OpenAiRequest&, v1::GenerateRequest&) {
    return Unsupported(v, "suffix", "insertion is not implemented");
  };
  f["best_of"] = [](const Json& v, OpenAiRequest& o, v1::GenerateRequest&) -> absl::Status {
    ASSIGN_OR_RETURN(int32_t n, Int32(v, "best_of"));
    if (n > 1) return Bad("'best_of' > 1 is not supported (candidates are not ranked); use 'n'");
    return absl::OkStatus();
  };
  return f;
}

std::map<std::string, FieldParser, std::less<>> ChatFields() {
  auto f = CommonFields();
  f["messages"] = [](const Json&, OpenAiRequest&, v1::GenerateRequest&) { return absl::OkStatus(); };  // below
  f["max_completion_tokens"] = f["max_tokens"];
  f["logprobs"] = [](const Json& v, OpenAiRequest& o, v1::GenerateRequest&) -> absl::Status {
    ASSIGN_OR_RETURN(o.logprobs, Bool(v, "logprobs"));
    return absl::OkStatus();
  };
  f["top_logprobs"] = [](const Json& v, OpenAiRequest& o, v1::GenerateRequest&) -> absl::Status {
    ASSIGN_OR_RETURN(int32_t n, Int32(v, "top_logprobs"));
    if (n < 0 || n > kMaxTopLogprobs) return Bad("'top_logprobs' must be in [0, ", kMaxTopLogprobs, "], got ", n);
    o.top_logprobs = n;
    return absl::OkStatus();
  };
  f["chat_template_kwargs"] = [](const Json& v, OpenAiRequest& o, v1::GenerateRequest&) -> absl::Status {
    if (!v.is_object()) return Bad("'chat_template_kwargs' must be an object");
    o.conversation.kwargs = v;
    return absl::OkStatus();
  };
  f["add_generation_prompt"] = [](const Json& v, OpenAiRequest& o, v1::GenerateRequest&) -> absl::Status {
    ASSIGN_OR_RETURN(o.conversation.add_generation_prompt, Bool(v, "add_generation_prompt"));
    return absl::OkStatus();
  };
  f["tools"] = [](const Json& v, OpenAiRequest&, v1::GenerateRequest&) {
    return Unsupported(v, "tools", "tool calls are not parsed from the output (use the gRPC Chat RPC's tools_json to render them)");
  };
  f["functions"] = [](const Json& v, OpenAiRequest&, v1::GenerateRequest&) {
    return Unsupported(v, "functions", "tool calls are not implemented");
  };
  f["tool_choice"] = f["function_call"] = [](const Json& v, OpenAiRequest&, v1::GenerateRequest&) -> absl::Status {
    if (v.is_string() && v.get<std::string>() == "none") return absl::OkStatus();
    return Unsupported(v, "tool_choice", "tool calls are not implemented");
  };
  // Only meaningful with tools, which are refused.
  f["parallel_tool_calls"] = [](const Json&, OpenAiRequest&, v1::GenerateRequest&) { return absl::OkStatus(); };
  f["response_format"] = [](const Json& v, OpenAiRequest&, v1::GenerateRequest&) -> absl::Status {
    if (v.is_object() && v.size() == 1 && v.contains("type") && v["type"] == "text") return absl::OkStatus();
    return Unsupported(v, "response_format", "only {\"type\": \"text\"}: JSON mode and json_schema are not implemented");
  };
  f["store"] = [](const Json& v, OpenAiRequest&, v1::GenerateRequest&) {
    return Unsupported(v, "store", "completions are not stored");
  };
  f["metadata"] = [](const Json&, OpenAiRequest&, v1::GenerateRequest&) { return absl::OkStatus(); };  // with store
  f["modalities"] = [](const Json& v, OpenAiRequest&, v1::GenerateRequest&) -> absl::Status {
    if (v.is_array() && v.size() == 1 && v[0] == "text") return absl::OkStatus();
    return Unsupported(v, "modalities", "only [\"text\"]");
  };
  f["audio"] = f["prediction"] = f["web_search_options"] = [](const Json& v, OpenAiRequest&, v1::GenerateRequest&) {
    return Unsupported(v, "audio/prediction/web_search_options", "not implemented");
  };
  f["reasoning_effort"] = [](const Json& v, OpenAiRequest&, v1::GenerateRequest&) {
    return Unsupported(v, "reasoning_effort", "not implemented (use chat_template_kwargs)");
  };
  return f;
}

absl::Status ApplyFields(const Json& body, const std::map<std::string, FieldParser, std::less<>>& fields,
                         OpenAiRequest& out, v1::GenerateRequest& options) {
  for (const auto& [key, value] : body.items()) {
    auto it = fields.find(key);
    if (it == fields.end()) return Bad("unknown or unsupported field '", key, "'");
    if (value.is_null()) continue;
    RETURN_IF_ERROR(it->second(value, out, options));
  }
  if (!out.stream && out.include_usage) return Bad("'stream_options' is only allowed with 'stream': true");
  return absl::OkStatus();
}

// A chat message's content: a string, or an array of text parts (joined).
absl::StatusOr<Json> MessageContent(const Json& content, const std::string& where) {
  if (content.is_null() || content.is_string()) return content;
  if (!content.is_array()) return Bad(where, ".content must be a string or an array of content parts");
  std::string text;
  for (const Json& part : content) {
    if (!part.is_object() || !part.contains("type") || part["type"] != "text" || !part.contains("text") ||
        !part["text"].is_string())
      return Bad(where, ".content: only parts {\"type\": \"text\", \"text\": ...} are supported (no images or audio)");
    text += part["text"].get<std::string>();
  }
  return Json(text);
}

absl::Status ParseMessages(const Json& body, ChatRequest& chat) {
  auto it = body.find("messages");
  if (it == body.end() || !it->is_array() || it->empty()) return Bad("'messages' must be a non-empty array");
  for (size_t i = 0; i < it->size(); ++i) {
    const Json& m = (*it)[i];
    const std::string where = absl::StrCat("messages[", i, "]");
    if (!m.is_object()) return Bad(where, " must be an object");
    if (!m.contains("role") || !m["role"].is_string()) return Bad(where, ".role must be a string");
    Json message = m;
    ASSIGN_OR_RETURN(message["content"], MessageContent(m.contains("content") ? m["content"] : Json(), where));
    // The template reads tool call arguments as the JSON text OpenAI sends; nothing to convert.
    chat.messages.push_back(std::move(message));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<OpenAiRequest> ParseCompletionRequest(std::string_view body_text) {
  ASSIGN_OR_RETURN(Json body, ParseBody(body_text));
  OpenAiRequest out;
  v1::GenerateRequest options;
  RETURN_IF_ERROR(ApplyFields(body, CompletionFields(), out, options));
  if (out.logprobs) options.set_top_logprobs(std::max(out.top_logprobs, 1));  // the sampled token's needs 1
  auto it = body.find("prompt");
  if (it == body.end() || it->is_null()) return Bad("'prompt' is required");
  auto add_text = [&](const Json& v) -> absl::Status {
    v1::GenerateRequest r = options;
    r.set_text(v.get<std::string>());
    out.prompts.push_back(std::move(r));
    return absl::OkStatus();
  };
  auto add_ids = [&](const Json& v) -> absl::Status {
    ASSIGN_OR_RETURN(std::vector<int32_t> ids, IdList(v, "prompt"));
    v1::GenerateRequest r = options;
    r.mutable_token_ids()->mutable_ids()->Add(ids.begin(), ids.end());
    out.prompts.push_back(std::move(r));
    return absl::OkStatus();
  };
  const Json& prompt = *it;
  if (prompt.is_string()) {
    RETURN_IF_ERROR(add_text(prompt));
  } else if (prompt.is_array() && !prompt.empty() && prompt[0].is_number()) {
    RETURN_IF_ERROR(add_ids(prompt));
  } else if (prompt.is_array() && !prompt.empty()) {
    for (const Json& p : prompt) {
      if (p.is_string()) {
        RETURN_IF_ERROR(add_text(p));
      } else if (p.is_array()) {
        RETURN_IF_ERROR(add_ids(p));
      } else {
        return Bad("'prompt' must be a string, an array of token ids, or an array of either");
      }
    }
  } else {
    return Bad("'prompt' must be a string, an array of token ids, or an array of either");
  }
  if (static_cast<int>(out.prompts.size()) * out.n > kMaxChoices)
    return Bad(out.prompts.size(), " prompts x n=", out.n, " is more than the ", kMaxChoices,
               " choices one request may ask for");
  return out;
}

absl::StatusOr<OpenAiRequest> ParseChatCompletionRequest(std::string_view body_text) {
  ASSIGN_OR_RETURN(Json body, ParseBody(body_text));
  OpenAiRequest out;
  out.chat = true;
  out.conversation.add_generation_prompt = true;
  v1::GenerateRequest options;
  RETURN_IF_ERROR(ApplyFields(body, ChatFields(), out, options));
  if (out.top_logprobs > 0 && !out.logprobs) return Bad("'top_logprobs' needs 'logprobs': true");
  if (out.logprobs) options.set_top_logprobs(std::max(out.top_logprobs, 1));
  RETURN_IF_ERROR(ParseMessages(body, out.conversation));
  out.prompts.push_back(std::move(options));
  return out;
}

}  // namespace llm::server
