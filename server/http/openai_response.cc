#include "server/http/openai_response.h"

#include <random>

#include "absl/strings/str_cat.h"

namespace llm::server {
namespace {

OrderedJson Bytes(const std::string& text) {
  OrderedJson bytes = OrderedJson::array();
  for (unsigned char c : text) bytes.push_back(static_cast<int>(c));
  return bytes;
}

}  // namespace

std::string NewResponseId(bool chat) {
  thread_local std::mt19937_64 rng(std::random_device{}());
  return absl::StrCat(chat ? "chatcmpl-" : "cmpl-", absl::Hex(rng(), absl::kZeroPad16),
                      absl::Hex(rng(), absl::kZeroPad16));
}

const char* OpenAiFinishReason(FinishReason reason) {
  switch (reason) {
    case FinishReason::kLength:
      return "length";
    case FinishReason::kCancelled:
    case FinishReason::kDeadline:
      return "abort";  // vLLM's word; only reaches a client whose request a drain timeout ended
    case FinishReason::kError:
      return "error";
    default:
      return "stop";
  }
}

std::string ChoiceLogprobs::TokenText(int32_t id) const {
  if (shape_.tokenizer) {
    // One token alone: a byte-level token that is part of a character decodes to U+FFFD (the
    // `bytes` field then holds those of U+FFFD, as in OpenAI's answers for such tokens).
    absl::StatusOr<std::string> text = shape_.tokenizer->Decode({id}, /*skip_special_tokens=*/false);
    if (text.ok()) return *std::move(text);
  }
  return absl::StrCat("token_id:", id);
}

OrderedJson ChoiceLogprobs::Part(const std::vector<SampleResult>& samples) {
  if (shape_.chat) {
    OrderedJson content = OrderedJson::array();
    for (const SampleResult& s : samples) {
      const std::string token = TokenText(s.token);
      OrderedJson top = OrderedJson::array();
      for (int i = 0; i < std::min(s.num_top, shape_.top_logprobs); ++i) {
        const std::string alt = TokenText(s.top[i].token);
        top.push_back({{"token", alt}, {"logprob", s.top[i].logprob}, {"bytes", Bytes(alt)}});
      }
      content.push_back({{"token", token}, {"logprob", s.logprob}, {"bytes", Bytes(token)}, {"top_logprobs", top}});
    }
    return {{"content", content}};
  }
  OrderedJson tokens = OrderedJson::array(), token_logprobs = OrderedJson::array(), tops = OrderedJson::array(),
              offsets = OrderedJson::array();
  for (const SampleResult& s : samples) {
    const std::string token = TokenText(s.token);
    tokens.push_back(token);
    token_logprobs.push_back(s.logprob);
    offsets.push_back(text_offset_);
    text_offset_ += static_cast<int64_t>(token.size());
    if (shape_.top_logprobs > 0) {
      OrderedJson top = OrderedJson::object();
      for (int i = 0; i < std::min(s.num_top, shape_.top_logprobs); ++i) top[TokenText(s.top[i].token)] = s.top[i].logprob;
      tops.push_back(std::move(top));
    } else {
      tops.push_back(nullptr);
    }
  }
  return {{"tokens", tokens}, {"token_logprobs", token_logprobs}, {"top_logprobs", tops}, {"text_offset", offsets}};
}

OrderedJson ChoiceLogprobs::Append(const std::vector<SampleResult>& samples) {
  if (!shape_.logprobs) return nullptr;
  OrderedJson part = Part(samples);
  if (all_.is_null()) {
    all_ = part;
  } else {
    for (auto& [key, value] : part.items())
      for (auto& element : value) all_[key].push_back(element);
  }
  return part;
}

OrderedJson UsageJson(const Usage& u) {
  return {{"prompt_tokens", u.prompt_tokens},
          {"completion_tokens", u.completion_tokens},
          {"total_tokens", u.prompt_tokens + u.completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", u.cached_prompt_tokens}}}};
}

namespace {

OrderedJson Envelope(const ResponseShape& shape, bool chunk) {
  const char* object = shape.chat ? (chunk ? "chat.completion.chunk" : "chat.completion") : "text_completion";
  return {{"id", shape.id}, {"object", object}, {"created", shape.created}, {"model", shape.model}};
}

}  // namespace

OrderedJson ChunkJson(const ResponseShape& shape, int index, const std::string& text, bool role,
                      OrderedJson logprobs, const char* finish_reason) {
  OrderedJson choice = {{"index", index}};
  if (shape.chat) {
    OrderedJson delta = OrderedJson::object();
    if (role) delta["role"] = "assistant";
    if (role || !text.empty()) delta["content"] = text;
    choice["delta"] = std::move(delta);
  } else {
    choice["text"] = text;
  }
  choice["logprobs"] = std::move(logprobs);
  choice["finish_reason"] = finish_reason ? OrderedJson(finish_reason) : OrderedJson(nullptr);
  OrderedJson chunk = Envelope(shape, true);
  chunk["choices"] = OrderedJson::array({std::move(choice)});
  if (shape.include_usage) chunk["usage"] = nullptr;
  return chunk;
}

OrderedJson UsageChunkJson(const ResponseShape& shape, const Usage& usage) {
  OrderedJson chunk = Envelope(shape, true);
  chunk["choices"] = OrderedJson::array();
  chunk["usage"] = UsageJson(usage);
  return chunk;
}

OrderedJson ResponseJson(const ResponseShape& shape, const std::vector<FinishedChoice>& choices,
                         const Usage& usage) {
  OrderedJson list = OrderedJson::array();
  for (size_t i = 0; i < choices.size(); ++i) {
    OrderedJson choice = {{"index", i}};
    if (shape.chat) {
      choice["message"] = {{"role", "assistant"}, {"content", choices[i].text}};
    } else {
      choice["text"] = choices[i].text;
    }
    choice["logprobs"] = choices[i].logprobs;
    choice["finish_reason"] = choices[i].finish_reason;
    list.push_back(std::move(choice));
  }
  OrderedJson response = Envelope(shape, false);
  response["choices"] = std::move(list);
  response["usage"] = UsageJson(usage);
  return response;
}

std::string SseEvent(const OrderedJson& json) {
  return absl::StrCat("data: ", json.dump(-1, ' ', false, OrderedJson::error_handler_t::replace), "\n\n");
}

}  // namespace llm::server
