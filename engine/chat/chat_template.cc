#include "engine/chat/chat_template.h"

#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "engine/chat/cat.h"
#include "engine/chat/json_value.h"
#include "kernels/core/status.h"

namespace llm {
namespace {

using chat::Cat;
using chat::CatAppend;
using chat::Value;
using chat::ValueDict;
using chat::ValueList;
using Json = nlohmann::ordered_json;

// The variables transformers' special_tokens_map gives a template (those that are set).
constexpr const char* kSpecialTokenKeys[] = {"bos_token", "eos_token", "unk_token",  "sep_token",
                                             "pad_token", "cls_token", "mask_token"};
// Names the render passes itself; a request's kwargs may not replace them.
constexpr const char* kReservedNames[] = {"messages", "tools", "documents", "add_generation_prompt"};

absl::StatusOr<std::string> ReadText(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(Cat("cannot open ", path.string()));
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

absl::StatusOr<Json> ParseJsonText(std::string_view text, std::string_view what) {
  Json json = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded()) return absl::InvalidArgumentError(Cat(what, " is not valid JSON"));
  return json;
}

// The templates of a `chat_template` field: a string, or a list of {"name", "template"}.
absl::StatusOr<std::map<std::string, std::string>> TemplatesOf(const Json& field, std::string_view what) {
  std::map<std::string, std::string> out;
  if (field.is_string()) {
    out["default"] = field.get<std::string>();
    return out;
  }
  if (field.is_array()) {
    for (const Json& item : field) {
      if (!item.is_object() || !item.contains("name") || !item.contains("template") || !item["name"].is_string() ||
          !item["template"].is_string())
        return absl::InvalidArgumentError(Cat(what, ": each named chat template needs a name and a template"));
      out[item["name"].get<std::string>()] = item["template"].get<std::string>();
    }
    if (!out.empty()) return out;
  }
  return absl::InvalidArgumentError(Cat(what, ": chat_template must be a string or a list of named templates"));
}

// A token as tokenizer_config.json writes it: a string or an AddedToken object {"content": ...}.
std::optional<Json> TokenText(const Json& token) {
  if (token.is_string()) return token;
  if (token.is_object() && token.contains("content") && token["content"].is_string()) return token["content"];
  return std::nullopt;
}

// True when the template has a `{% for ... in message['content'] %}` loop (or .content, or a
// variable named content): it then expects content as a list of parts, as vLLM decides too.
bool IteratesContent(std::string_view source) {
  for (std::string_view pattern : {"in message['content']", "in message[\"content\"]", "in message.content",
                                   "in content", "in msg['content']", "in msg.content"}) {
    for (size_t at = source.find(pattern); at != std::string_view::npos; at = source.find(pattern, at + 1)) {
      const size_t tag = source.rfind("{%", at);
      if (tag == std::string_view::npos) continue;
      std::string_view head = source.substr(tag + 2, at - tag - 2);
      while (!head.empty() && (head.front() == '-' || head.front() == '+' || head.front() == ' ')) head.remove_prefix(1);
      if (head.substr(0, 4) == "for " && head.find("%}") == std::string_view::npos) return true;
    }
  }
  return false;
}

// One OpenAI-shaped message as the template sees it.
absl::StatusOr<Value> NormalizeMessage(const Json& message, size_t index, bool keep_parts) {
  const std::string where = Cat("messages[", index, "]");
  if (!message.is_object()) return absl::InvalidArgumentError(Cat(where, " must be an object"));
  if (!message.contains("role") || !message["role"].is_string())
    return absl::InvalidArgumentError(Cat(where, " needs a string role"));
  ValueDict out;
  for (const auto& [key, value] : message.items()) {
    if (key == "content" && value.is_array()) {
      std::string joined;
      ValueList parts;
      for (size_t i = 0; i < value.size(); ++i) {
        const Json& part = value[i];
        const bool text_part = part.is_object() && part.value("type", "") == "text" && part.contains("text") &&
                               part["text"].is_string();
        if (!text_part && !keep_parts)
          return absl::InvalidArgumentError(Cat(where, ".content[", i, "]: only text parts are supported"));
        if (text_part) CatAppend(&joined, i > 0 ? "\n" : "", part["text"].get<std::string>());
        parts.push_back(chat::FromJson(part));
      }
      out.Set(Value::String(key), keep_parts ? Value::List(std::move(parts)) : Value::String(std::move(joined)));
    } else if (key == "tool_calls" && value.is_array()) {
      ValueList calls;
      for (size_t i = 0; i < value.size(); ++i) {
        Json call = value[i];
        if (call.is_object() && call.contains("function") && call["function"].is_object()) {
          Json& fn = call["function"];
          if (fn.contains("arguments") && fn["arguments"].is_string()) {
            Json args = Json::parse(fn["arguments"].get<std::string>(), nullptr, false);
            if (args.is_discarded())
              return absl::InvalidArgumentError(
                  Cat(where, ".tool_calls[", i, "].function.arguments is not valid JSON"));
            fn["arguments"] = std::move(args);
          }
        }
        calls.push_back(chat::FromJson(call));
      }
      out.Set(Value::String(key), Value::List(std::move(calls)));
    } else {
      out.Set(Value::String(key), chat::FromJson(value));
    }
  }
  return Value::Dict(std::move(out));
}

}  // namespace

absl::StatusOr<ChatRequest> ParseChatRequest(std::string_view text) {
  ASSIGN_OR_RETURN(Json json, ParseJsonText(text, "the request"));
  if (!json.is_object()) return absl::InvalidArgumentError("the request must be a JSON object");
  ChatRequest request;
  if (!json.contains("messages") || !json["messages"].is_array())
    return absl::InvalidArgumentError("the request needs a \"messages\" array");
  request.messages = json["messages"];
  if (json.contains("tools") && !json["tools"].is_null()) {
    if (!json["tools"].is_array()) return absl::InvalidArgumentError("\"tools\" must be an array");
    request.tools = json["tools"];
  }
  if (json.contains("add_generation_prompt")) {
    if (!json["add_generation_prompt"].is_boolean())
      return absl::InvalidArgumentError("\"add_generation_prompt\" must be a boolean");
    request.add_generation_prompt = json["add_generation_prompt"].get<bool>();
  }
  for (const char* key : {"kwargs", "chat_template_kwargs"}) {
    if (!json.contains(key) || json[key].is_null()) continue;
    if (!json[key].is_object()) return absl::InvalidArgumentError(Cat("\"", key, "\" must be an object"));
    for (const auto& [k, v] : json[key].items()) request.kwargs[k] = v;
  }
  return request;
}

absl::StatusOr<std::unique_ptr<ChatTemplate>> ChatTemplate::Create(std::map<std::string, std::string> sources,
                                                                   Json special_tokens) {
  if (sources.empty()) return absl::InvalidArgumentError("no chat template given");
  std::unique_ptr<ChatTemplate> t(new ChatTemplate());
  for (auto& [name, source] : sources) {
    absl::StatusOr<std::shared_ptr<const chat::Template>> parsed = chat::Template::Parse(source);
    if (!parsed.ok())
      return absl::Status(parsed.status().code(), Cat("chat template '", name, "': ", parsed.status().message()));
    t->templates_[name] = Named{*std::move(parsed), IteratesContent(source)};
  }
  if (special_tokens.is_object()) {
    for (const auto& [k, v] : special_tokens.items()) t->special_tokens_.Set(Value::String(k), chat::FromJson(v));
  }
  return t;
}

absl::StatusOr<Json> ChatTemplate::SpecialTokensOf(std::string_view tokenizer_config_json) {
  ASSIGN_OR_RETURN(Json config, ParseJsonText(tokenizer_config_json, "tokenizer_config.json"));
  Json tokens = Json::object();
  if (!config.is_object()) return tokens;
  for (const char* key : kSpecialTokenKeys) {
    if (!config.contains(key)) continue;
    if (std::optional<Json> text = TokenText(config[key])) tokens[key] = *text;
  }
  if (config.contains("additional_special_tokens") && config["additional_special_tokens"].is_array()) {
    Json list = Json::array();
    for (const Json& token : config["additional_special_tokens"])
      if (std::optional<Json> text = TokenText(token)) list.push_back(*text);
    tokens["additional_special_tokens"] = list;
  }
  return tokens;
}

absl::StatusOr<std::unique_ptr<ChatTemplate>> ChatTemplate::ForModel(const std::filesystem::path& path,
                                                                     const std::filesystem::path& override_file) {
  const std::filesystem::path dir = std::filesystem::is_directory(path) ? path : path.parent_path();
  Json special = Json::object();
  std::map<std::string, std::string> sources;
  const std::filesystem::path config_path = dir / "tokenizer_config.json";
  Json config;
  if (std::filesystem::exists(config_path)) {
    ASSIGN_OR_RETURN(std::string text, ReadText(config_path));
    ASSIGN_OR_RETURN(special, SpecialTokensOf(text));
    ASSIGN_OR_RETURN(config, ParseJsonText(text, config_path.string()));
  }
  auto from_json_file = [&](const std::filesystem::path& file) -> absl::Status {
    ASSIGN_OR_RETURN(std::string text, ReadText(file));
    ASSIGN_OR_RETURN(Json json, ParseJsonText(text, file.string()));
    if (!json.is_object() || !json.contains("chat_template"))
      return absl::InvalidArgumentError(Cat(file.string(), " has no \"chat_template\""));
    ASSIGN_OR_RETURN(sources, TemplatesOf(json["chat_template"], file.string()));
    return absl::OkStatus();
  };
  if (!override_file.empty()) {
    if (override_file.extension() == ".json") {
      RETURN_IF_ERROR(from_json_file(override_file));
    } else {
      ASSIGN_OR_RETURN(sources["default"], ReadText(override_file));
    }
  } else if (std::filesystem::exists(dir / "chat_template.jinja")) {
    ASSIGN_OR_RETURN(sources["default"], ReadText(dir / "chat_template.jinja"));
  } else if (std::filesystem::exists(dir / "chat_template.json")) {
    RETURN_IF_ERROR(from_json_file(dir / "chat_template.json"));
  } else if (config.is_object() && config.contains("chat_template") && !config["chat_template"].is_null()) {
    ASSIGN_OR_RETURN(sources, TemplatesOf(config["chat_template"], config_path.string()));
  } else {
    return absl::NotFoundError(Cat("the model in ", dir.string(), " has no chat template"));
  }
  return Create(std::move(sources), std::move(special));
}

const ChatTemplate::Named& ChatTemplate::Choose(bool has_tools) const {
  if (has_tools) {
    if (auto it = templates_.find("tool_use"); it != templates_.end()) return it->second;
  }
  if (auto it = templates_.find("default"); it != templates_.end()) return it->second;
  return templates_.begin()->second;
}

absl::StatusOr<std::string> ChatTemplate::Render(const ChatRequest& request) const {
  if (!request.messages.is_array()) return absl::InvalidArgumentError("messages must be a list");
  const bool has_tools = !request.tools.is_null();
  const Named& chosen = Choose(has_tools);
  ValueList messages;
  messages.reserve(request.messages.size());
  for (size_t i = 0; i < request.messages.size(); ++i) {
    ASSIGN_OR_RETURN(Value m, NormalizeMessage(request.messages[i], i, chosen.iterates_content));
    messages.push_back(std::move(m));
  }
  ValueDict context = special_tokens_;
  if (request.kwargs.is_object()) {
    for (const auto& [k, v] : request.kwargs.items()) {
      for (const char* reserved : kReservedNames) {
        if (k == reserved)
          return absl::InvalidArgumentError(Cat("chat template kwargs may not set '", k, "'"));
      }
      context.Set(Value::String(k), chat::FromJson(v));
    }
  }
  context.Set(Value::String("messages"), Value::List(std::move(messages)));
  context.Set(Value::String("tools"), has_tools ? chat::FromJson(request.tools) : Value::None());
  context.Set(Value::String("documents"), Value::None());
  context.Set(Value::String("add_generation_prompt"), Value::Bool(request.add_generation_prompt));
  return chosen.parsed->Render(context, limits_, clock_());
}

absl::StatusOr<std::vector<int32_t>> ChatTemplate::RenderIds(const ChatRequest& request,
                                                             const Tokenizer& tokenizer) const {
  ASSIGN_OR_RETURN(std::string text, Render(request));
  return tokenizer.Encode(text, /*add_special_tokens=*/false);
}

}  // namespace llm
