// ChatTemplate: a model's chat template, found once, parsed once, and rendered per request.
//
// Where the template comes from (first found wins): an override file (`--chat-template`: Jinja
// text, or JSON holding "chat_template"); `chat_template.jinja` beside the tokenizer;
// `chat_template.json` beside it; `chat_template` in `tokenizer_config.json`, a string or a list of
// named templates ({"name", "template"}: `tool_use` when the request has tools and the model has
// one, `default` otherwise). The special tokens of tokenizer_config.json (bos_token, eos_token,
// unk_token, pad_token, ..., additional_special_tokens) are template variables, as transformers'
// apply_chat_template passes them.
//
// Requests take OpenAI's message shapes: `content` a string, null, or a list of text parts (joined
// with "\n" unless the template iterates over a message's content, which then sees the parts);
// `tool_calls[].function.arguments` a JSON string, parsed into an object for the template; `tool`
// messages with tool_call_id. The rendered text already holds the special tokens the model expects
// (BOS included): tokenize it with add_special_tokens = false, or the prompt starts with two BOS.
#pragma once

#include <cstdint>
#include <ctime>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/chat/template.h"
#include "engine/tokenizer/tokenizer.h"
#include "nlohmann/json.hpp"

namespace llm {

struct ChatRequest {
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  nlohmann::ordered_json tools;   // null: no tools (the template sees None)
  bool add_generation_prompt = false;
  nlohmann::ordered_json kwargs;  // extra template variables (chat_template_kwargs); null or an object
};

// Reads {"messages": [...], "tools": [...]?, "add_generation_prompt": bool?, "kwargs": {...}?}
// (also "chat_template_kwargs" for kwargs). InvalidArgument on other shapes.
absl::StatusOr<ChatRequest> ParseChatRequest(std::string_view json);

class ChatTemplate {
 public:
  // Named templates (name -> Jinja source) and template variables for the special tokens.
  static absl::StatusOr<std::unique_ptr<ChatTemplate>> Create(std::map<std::string, std::string> sources,
                                                              nlohmann::ordered_json special_tokens);
  // The template of the model whose tokenizer files are in `dir` (see the file comment);
  // `override_file` (may be empty) wins over them. NotFound when the model has none.
  static absl::StatusOr<std::unique_ptr<ChatTemplate>> ForModel(const std::filesystem::path& dir,
                                                                const std::filesystem::path& override_file = {});
  // The special-token variables of a tokenizer_config.json text.
  static absl::StatusOr<nlohmann::ordered_json> SpecialTokensOf(std::string_view tokenizer_config_json);

  // The prompt text. Template errors are InvalidArgument (ResourceExhausted past the render
  // limits) with the template's line and jinja2's error class in the message.
  absl::StatusOr<std::string> Render(const ChatRequest& request) const;
  // The prompt's token ids: the text encoded with special tokens recognised and none added.
  absl::StatusOr<std::vector<int32_t>> RenderIds(const ChatRequest& request, const Tokenizer& tokenizer) const;

  void set_limits(const chat::RenderLimits& limits) { limits_ = limits; }
  // What strftime_now() reads (templates that print today's date); the system clock by default.
  // Tests pin it to the instant their references were rendered at.
  void set_clock(std::function<std::time_t()> clock) { clock_ = std::move(clock); }

 private:
  struct Named {
    std::shared_ptr<const chat::Template> parsed;
    bool iterates_content = false;  // the template loops over a message's content parts
  };
  ChatTemplate() = default;
  const Named& Choose(bool has_tools) const;

  std::map<std::string, Named> templates_;
  chat::ValueDict special_tokens_;
  chat::RenderLimits limits_;
  std::function<std::time_t()> clock_ = [] { return std::time(nullptr); };
};

}  // namespace llm
