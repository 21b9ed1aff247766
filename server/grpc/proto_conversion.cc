#include "server/grpc/proto_conversion.h"

#include "nlohmann/json.hpp"

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "kernels/core/status.h"

namespace llm::server {
namespace {

// Length of the UTF-8 sequence starting at s[i], or 0 when it is not a valid one (overlong forms,
// surrogates and code points past U+10FFFF are invalid).
size_t Utf8SequenceLength(std::string_view s, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char b0 = byte(i);
  if (b0 < 0x80) return 1;
  size_t n;
  unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    n = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    n = 3;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    n = 4;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  if (i + n > s.size()) return 0;
  if (byte(i + 1) < lo || byte(i + 1) > hi) return 0;
  for (size_t k = 2; k < n; ++k)
    if ((byte(i + k) & 0xC0) != 0x80) return 0;
  return n;
}

absl::Status InvalidArgument(auto&&... parts) { return absl::InvalidArgumentError(absl::StrCat(parts...)); }

absl::StatusOr<std::vector<int32_t>> PromptTokens(const v1::GenerateRequest& request,
                                                  const Tokenizer* tokenizer) {
  switch (request.prompt_case()) {
    case v1::GenerateRequest::kTokenIds:
      return std::vector<int32_t>(request.token_ids().ids().begin(), request.token_ids().ids().end());
    case v1::GenerateRequest::kText: {
      if (!tokenizer)
        return absl::FailedPreconditionError(
            "text prompts need the model's tokenizer and this model has none: send token_ids instead");
      // Special tokens alone (a BOS) are not a prompt: the README promises INVALID_ARGUMENT.
      if (request.text().empty()) return InvalidArgument("the prompt is empty: text is \"\"");
      if (absl::Status s = CheckUtf8(request.text(), "the prompt text"); !s.ok()) return s;
      const bool add_special = !request.has_add_special_tokens() || request.add_special_tokens();
      return tokenizer->Encode(request.text(), add_special);
    }
    case v1::GenerateRequest::PROMPT_NOT_SET:
      break;
  }
  return InvalidArgument("the prompt is empty: set text or token_ids");
}

// Unset fields take the model's defaults, then the engine's.
void FillSampling(const v1::SamplingParams& in, int32_t top_logprobs, const GenerationDefaults& defaults,
                  GenerateRequest& out) {
  SamplingParams& s = out.sampling;
  s.temperature = in.has_temperature() ? in.temperature() : defaults.temperature.value_or(1.0f);
  s.top_k = in.has_top_k() ? in.top_k() : defaults.top_k.value_or(0);
  if (s.top_k == -1) s.top_k = 0;  // vLLM's and the OpenAI clients' spelling of "off"
  s.top_p = in.has_top_p() ? in.top_p() : defaults.top_p.value_or(1.0f);
  s.min_p = in.has_min_p() ? in.min_p() : defaults.min_p.value_or(0.0f);
  s.repetition_penalty =
      in.has_repetition_penalty() ? in.repetition_penalty() : defaults.repetition_penalty.value_or(1.0f);
  s.presence_penalty = in.presence_penalty();
  s.frequency_penalty = in.frequency_penalty();
  s.num_top_logprobs = top_logprobs;
  out.has_seed = in.has_seed();
  s.seed = in.seed();
  out.logit_bias.clear();
  for (const auto& [token, bias] : in.logit_bias()) out.logit_bias.push_back({token, bias});
}

absl::Status FillStopping(const v1::StoppingCriteria& in, GenerateRequest& out) {
  StopCriteria& s = out.stop;
  s.max_tokens = in.has_max_tokens() ? in.max_tokens() : kDefaultMaxTokens;
  s.min_tokens = in.min_tokens();
  s.ignore_eos = in.ignore_eos();
  s.stop_token_ids.assign(in.stop_token_ids().begin(), in.stop_token_ids().end());
  for (int i = 0; i < in.stop_size(); ++i) {
    if (absl::Status st = CheckUtf8(in.stop(i), absl::StrCat("stop string ", i)); !st.ok()) return st;
    s.stop_strings.push_back(in.stop(i));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckUtf8(std::string_view bytes, std::string_view what) {
  for (size_t i = 0; i < bytes.size();) {
    const size_t n = Utf8SequenceLength(bytes, i);
    if (n == 0)
      return InvalidArgument(std::string(what), " is not valid UTF-8 (bad byte 0x",
                             absl::Hex(static_cast<unsigned char>(bytes[i]), absl::kZeroPad2), " at offset ",
                             i, ")");
    i += n;
  }
  return absl::OkStatus();
}

absl::Status CheckTextFits(const v1::GenerateRequest& request, const Tokenizer* tokenizer,
                           const RequestPolicy& policy) {
  if (request.prompt_case() != v1::GenerateRequest::kText || tokenizer == nullptr || policy.max_context <= 0)
    return absl::OkStatus();
  const std::optional<size_t> per_token = tokenizer->max_bytes_per_token();
  if (!per_token || *per_token == 0) return absl::OkStatus();
  const int64_t bytes = static_cast<int64_t>(request.text().size());
  const int64_t at_least = (bytes + static_cast<int64_t>(*per_token) - 1) / static_cast<int64_t>(*per_token);
  const int64_t max_tokens = request.stopping().has_max_tokens() ? request.stopping().max_tokens() : kDefaultMaxTokens;
  if (at_least + std::max<int64_t>(max_tokens, 1) <= policy.max_context) return absl::OkStatus();
  return InvalidArgument("the prompt text (", bytes, " bytes) cannot fit the context length ", policy.max_context,
                         ": it needs at least ", at_least, " tokens (a token of this model's tokenizer stands for at "
                         "most ", *per_token, " bytes), plus max_tokens ", max_tokens);
}

absl::StatusOr<GenerateRequest> ToEngineRequest(const v1::GenerateRequest& request, const Tokenizer* tokenizer,
                                                absl::Time deadline, const RequestPolicy& policy) {
  RETURN_IF_ERROR(CheckTextFits(request, tokenizer, policy));
  if (request.request_id().size() > kMaxRequestIdBytes)
    return InvalidArgument("request_id is ", request.request_id().size(), " bytes; at most ",
                           kMaxRequestIdBytes, " are allowed");
  GenerateRequest out;
  out.client_request_id = request.request_id();
  auto prompt = PromptTokens(request, tokenizer);
  if (!prompt.ok()) return prompt.status();
  out.prompt_tokens = std::move(*prompt);
  if (request.priority() > policy.max_priority)
    return InvalidArgument("priority ", request.priority(), " is above this server's limit of ", policy.max_priority,
                           " (the operator's --max-priority)");
  FillSampling(request.sampling(), request.top_logprobs(), policy.defaults, out);
  if (absl::Status s = FillStopping(request.stopping(), out); !s.ok()) return s;
  out.priority = request.priority();
  out.cache_salt = request.cache_salt();
  out.deadline = deadline;
  out.detokenize = tokenizer != nullptr;
  return out;
}

v1::FinishReason ToProtoFinishReason(FinishReason reason) {
  switch (reason) {
    case FinishReason::kNone:
      return v1::FINISH_REASON_UNSPECIFIED;
    case FinishReason::kLength:
      return v1::FINISH_REASON_LENGTH;
    case FinishReason::kStop:
      return v1::FINISH_REASON_STOP;
    case FinishReason::kEos:
      return v1::FINISH_REASON_EOS;
    case FinishReason::kCancelled:
      return v1::FINISH_REASON_CANCELLED;
    case FinishReason::kDeadline:
      return v1::FINISH_REASON_DEADLINE;
    case FinishReason::kError:
      return v1::FINISH_REASON_ERROR;
  }
  return v1::FINISH_REASON_UNSPECIFIED;
}

absl::StatusOr<ChatRequest> ToChatRequest(const v1::ChatRequest& request) {
  using Json = nlohmann::ordered_json;
  if (request.options().prompt_case() != v1::GenerateRequest::PROMPT_NOT_SET)
    return absl::InvalidArgumentError("Chat: options must not set a prompt (the conversation is the prompt)");
  auto parse = [](const std::string& text, const std::string& what, bool want_object) -> absl::StatusOr<Json> {
    if (absl::Status s = CheckUtf8(text, what); !s.ok()) return s;
    Json json = Json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (json.is_discarded() || (want_object ? !json.is_object() : !json.is_array()))
      return absl::InvalidArgumentError(absl::StrCat(what, " must be a JSON ", want_object ? "object" : "array"));
    return json;
  };
  ChatRequest out;
  out.add_generation_prompt = !request.has_add_generation_prompt() || request.add_generation_prompt();
  for (int i = 0; i < request.messages_size(); ++i) {
    const v1::ChatMessage& m = request.messages(i);
    const std::string where = absl::StrCat("messages[", i, "]");
    Json message = Json::object();
    if (!m.extra_json().empty()) {
      absl::StatusOr<Json> extra = parse(m.extra_json(), where + ".extra_json", true);
      if (!extra.ok()) return extra.status();
      message = *std::move(extra);
    }
    message["role"] = m.role();
    if (m.has_content()) {
      if (absl::Status s = CheckUtf8(m.content(), where + ".content"); !s.ok()) return s;
      message["content"] = m.content();
    } else {
      message["content"] = nullptr;
    }
    if (m.tool_calls_size() > 0) {
      Json calls = Json::array();
      for (const v1::ChatToolCall& call : m.tool_calls()) {
        if (absl::Status s = CheckUtf8(call.arguments_json(), where + ".tool_calls.arguments_json"); !s.ok()) return s;
        calls.push_back({{"id", call.id()},
                         {"type", "function"},
                         {"function", {{"name", call.name()}, {"arguments", call.arguments_json().empty() ? "{}" : call.arguments_json()}}}});
      }
      message["tool_calls"] = std::move(calls);
    }
    if (!m.tool_call_id().empty()) message["tool_call_id"] = m.tool_call_id();
    if (!m.name().empty()) message["name"] = m.name();
    out.messages.push_back(std::move(message));
  }
  if (!request.tools_json().empty()) {
    absl::StatusOr<Json> tools = parse(request.tools_json(), "tools_json", false);
    if (!tools.ok()) return tools.status();
    out.tools = *std::move(tools);
  }
  if (!request.chat_template_kwargs_json().empty()) {
    absl::StatusOr<Json> kwargs = parse(request.chat_template_kwargs_json(), "chat_template_kwargs_json", true);
    if (!kwargs.ok()) return kwargs.status();
    out.kwargs = *std::move(kwargs);
  }
  return out;
}

void AppendOutput(const RequestOutput& output, v1::GenerateResponse* response) {
  response->mutable_token_ids()->Add(output.token_ids.begin(), output.token_ids.end());
  response->mutable_text()->append(output.text);
  for (const SampleResult& sample : output.logprobs) {
    v1::TokenLogprobs* entry = response->add_logprobs();
    entry->set_token_id(sample.token);
    entry->set_logprob(sample.logprob);
    for (int i = 0; i < sample.num_top; ++i) {
      v1::TokenLogprob* top = entry->add_top();
      top->set_token_id(sample.top[i].token);
      top->set_logprob(sample.top[i].logprob);
    }
  }
  if (!output.finished) return;
  response->set_finish_reason(ToProtoFinishReason(output.finish_reason));
  v1::Usage* usage = response->mutable_usage();
  usage->set_prompt_tokens(output.prompt_tokens);
  usage->set_completion_tokens(output.completion_tokens);
  usage->set_preemptions(output.preemptions);
  usage->set_cached_prompt_tokens(output.cached_prompt_tokens);
  v1::Timings* timings = response->mutable_timings();
  timings->set_queue_ms(output.timings.queue_ms);
  timings->set_time_to_first_token_ms(output.timings.ttft_ms);
  timings->set_decode_ms(output.timings.decode_ms);
  timings->set_total_ms(output.timings.total_ms);
}

v1::ModelInfoResponse ToModelInfo(const EngineInfo& engine, const Tokenizer* tokenizer,
                                  const Deployment& deployment) {
  const ModelConfig& c = engine.config;
  v1::ModelInfoResponse info;
  info.set_model(deployment.model_name);
  info.set_architecture(c.model_type);
  info.set_context_length(engine.max_context);
  info.set_vocab_size(c.vocab_size);
  info.set_num_layers(c.num_layers);
  info.set_hidden_size(c.hidden_size);
  info.set_num_attention_heads(c.num_heads);
  info.set_num_kv_heads(c.num_kv_heads);
  info.set_weights_dtype(std::string(DTypeName(c.stored_dtype)));
  info.set_device(deployment.device);
  info.set_tensor_parallel_size(deployment.tensor_parallel);
  info.set_pipeline_parallel_size(deployment.pipeline_parallel);
  info.set_has_tokenizer(tokenizer != nullptr);
  std::vector<int32_t> eos = c.eos_token_ids;
  if (tokenizer)
    for (int32_t id : tokenizer->eos_token_ids())
      if (std::find(eos.begin(), eos.end(), id) == eos.end()) eos.push_back(id);
  info.mutable_eos_token_ids()->Add(eos.begin(), eos.end());
  v1::ServerLimits* limits = info.mutable_limits();
  limits->set_max_running_requests(engine.max_seqs);
  limits->set_max_tokens_per_step(engine.max_tokens_per_step);
  limits->set_max_queued_requests(deployment.max_queue);
  limits->set_kv_cache_blocks(engine.kv_blocks);
  limits->set_kv_block_size(engine.kv_block_size);
  limits->set_max_top_logprobs(kMaxTopLogprobs);
  limits->set_max_message_bytes(deployment.max_message_bytes);
  return info;
}

absl::Status FinishStatus(const RequestOutput& last) {
  switch (last.finish_reason) {
    case FinishReason::kCancelled:
      return absl::CancelledError("the request was cancelled");
    case FinishReason::kDeadline:
      return absl::DeadlineExceededError(
          absl::StrCat("the deadline passed after ", last.completion_tokens, " generated tokens"));
    case FinishReason::kError:
      return last.status.ok() ? absl::InternalError("generation failed") : last.status;
    default:
      return absl::OkStatus();
  }
}

}  // namespace llm::server
