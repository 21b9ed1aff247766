// llm chat-template: renders a chat template on one request, as the server's Chat RPC does, and
// prints {"text": ..., "ids": [...]} (ids: the text tokenized with special tokens recognised and
// none added). A template or request error is printed and exits 2.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>

#include "engine/chat/chat_template.h"
#include "engine/tokenizer/tokenizer.h"
#include "nlohmann/json.hpp"
#include "server/cli/commands.h"
#include "server/cli/flags.h"

namespace llm::cli {
namespace {

int Fail(const std::string& message, int code) {
  std::fprintf(stderr, "llm chat-template: %s\n", message.c_str());
  return code;
}

int Fail(const absl::Status& status, int code) { return Fail(std::string(status.message()), code); }

bool ReadAll(const std::string& path, std::string* out) {
  std::stringstream ss;
  if (path == "-") {
    ss << std::cin.rdbuf();
  } else {
    std::ifstream in(path, std::ios::binary);
    if (!in) return false;
    ss << in.rdbuf();
  }
  *out = ss.str();
  return true;
}

}  // namespace

int RunChatTemplate(int argc, char** argv) {
  FlagSet flags("chat-template",
                "Renders a chat template on a request and prints {\"text\": ..., \"ids\": [...]} as one JSON line.\n"
                "The request: {\"messages\": [...], \"tools\": [...]?, \"add_generation_prompt\": bool, "
                "\"kwargs\": {...}?}.");
  std::string template_path, tokenizer_path, bos, eos, request_arg;
  flags.String("template", &template_path,
               "the template: a Jinja file, or a JSON file with \"chat_template\" (tokenizer_config.json, "
               "chat_template.json)");
  flags.String("tokenizer", &tokenizer_path, "a tokenizer.json file (or a model folder holding one) for the ids");
  flags.String("bos-token", &bos, "the template's bos_token");
  flags.String("eos-token", &eos, "the template's eos_token");
  flags.String("request", &request_arg, "the request: a JSON file, '-' for stdin, or the JSON text itself");
  if (auto exit_code = HandleParse(flags, argc, argv)) return *exit_code;
  if (template_path.empty() || tokenizer_path.empty() || request_arg.empty())
    return Fail("--template, --tokenizer and --request are required", 2);

  std::string template_text, request_text;
  if (!ReadAll(template_path, &template_text)) return Fail("cannot open '" + template_path + "'", 2);
  if (!request_arg.empty() && request_arg.front() == '{') {
    request_text = request_arg;
  } else if (!ReadAll(request_arg, &request_text)) {
    return Fail("cannot open '" + request_arg + "'", 2);
  }

  std::map<std::string, std::string> sources;
  nlohmann::ordered_json special = nlohmann::ordered_json::object();
  if (template_path.size() > 5 && template_path.substr(template_path.size() - 5) == ".json") {
    nlohmann::ordered_json json = nlohmann::ordered_json::parse(template_text, nullptr, false);
    if (json.is_discarded() || !json.is_object() || !json.contains("chat_template"))
      return Fail(template_path + ": expected a JSON object with \"chat_template\"", 2);
    const nlohmann::ordered_json& field = json["chat_template"];
    if (field.is_string()) {
      sources["default"] = field.get<std::string>();
    } else if (field.is_array()) {
      for (const auto& named : field)
        if (named.is_object() && named.value("name", "") != "" && named.contains("template"))
          sources[named["name"].get<std::string>()] = named["template"].get<std::string>();
    }
    absl::StatusOr<nlohmann::ordered_json> tokens = ChatTemplate::SpecialTokensOf(template_text);
    if (!tokens.ok()) return Fail(tokens.status(), 2);
    special = *std::move(tokens);
  } else {
    sources["default"] = template_text;
  }
  if (flags.IsSet("bos-token")) special["bos_token"] = bos;
  if (flags.IsSet("eos-token")) special["eos_token"] = eos;

  absl::StatusOr<std::unique_ptr<ChatTemplate>> chat = ChatTemplate::Create(std::move(sources), std::move(special));
  if (!chat.ok()) return Fail(chat.status(), 2);
  absl::StatusOr<ChatRequest> request = ParseChatRequest(request_text);
  if (!request.ok()) return Fail(request.status(), 2);
  auto tokenizer = Tokenizer::Load(tokenizer_path);
  if (!tokenizer.ok()) return Fail(tokenizer.status(), 1);

  absl::StatusOr<std::string> text = (*chat)->Render(*request);
  if (!text.ok()) return Fail(text.status(), 2);
  absl::StatusOr<std::vector<int32_t>> ids = (*tokenizer)->Encode(*text, /*add_special_tokens=*/false);
  if (!ids.ok()) return Fail(ids.status(), 2);
  nlohmann::ordered_json out;
  out["text"] = *text;
  out["ids"] = *ids;
  std::printf("%s\n", out.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace).c_str());
  std::fflush(stdout);
  return 0;
}

}  // namespace llm::cli
