#include "server/grpc/llm_service.h"

#include "server/grpc/complete_reactor.h"
#include "server/grpc/generate_stream_reactor.h"
#include "server/grpc/proto_conversion.h"
#include "server/grpc/status_conversion.h"

namespace llm::server {
namespace {

// The call's `authorization` metadata against the server's API key.
absl::Status Authorize(const ServingState& state, const grpc::CallbackServerContext* context) {
  const auto& metadata = context->client_metadata();
  auto it = metadata.find("authorization");
  return state.Authorize(it == metadata.end() ? std::string_view()
                                              : std::string_view(it->second.data(), it->second.size()));
}

grpc::ServerUnaryReactor* FinishNow(grpc::CallbackServerContext* context, const absl::Status& status) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

absl::Status TokenizeInto(const Tokenizer& tokenizer, const v1::TokenizeRequest& request,
                          v1::TokenizeResponse* response) {
  if (absl::Status s = CheckUtf8(request.text(), "the text"); !s.ok()) return s;
  const bool add_special = !request.has_add_special_tokens() || request.add_special_tokens();
  absl::StatusOr<std::vector<int32_t>> ids = tokenizer.Encode(request.text(), add_special);
  if (!ids.ok()) return ids.status();
  response->mutable_token_ids()->Add(ids->begin(), ids->end());
  return absl::OkStatus();
}

absl::Status DetokenizeInto(const Tokenizer& tokenizer, const v1::DetokenizeRequest& request,
                            v1::DetokenizeResponse* response) {
  const std::vector<int32_t> ids(request.token_ids().begin(), request.token_ids().end());
  absl::StatusOr<std::string> text = tokenizer.Decode(ids, request.skip_special_tokens());
  if (!text.ok()) return text.status();
  response->set_text(*std::move(text));
  return absl::OkStatus();
}

// A streaming call refused before generation starts: finishes at once with the reason.
class RefusedStream final : public grpc::ServerWriteReactor<v1::GenerateResponse> {
 public:
  explicit RefusedStream(const grpc::Status& status) { Finish(status); }
  void OnDone() override { delete this; }
};

// The Generate request a Chat request becomes: its options with the rendered conversation's ids.
absl::StatusOr<v1::GenerateRequest> ChatToGenerate(const ServingState& state, const v1::ChatRequest& chat) {
  absl::StatusOr<ChatRequest> request = ToChatRequest(chat);
  if (!request.ok()) return request.status();
  absl::StatusOr<std::vector<int32_t>> ids = state.RenderChat(*request);
  if (!ids.ok()) return ids.status();
  v1::GenerateRequest generate = chat.options();
  generate.mutable_token_ids()->mutable_ids()->Add(ids->begin(), ids->end());
  return generate;
}

}  // namespace

grpc::ServerWriteReactor<v1::GenerateResponse>* LlmService::Chat(grpc::CallbackServerContext* context,
                                                                 const v1::ChatRequest* request) {
  if (absl::Status auth = Authorize(state_, context); !auth.ok()) return new RefusedStream(ToGrpcStatus(auth));
  absl::StatusOr<v1::GenerateRequest> generate = ChatToGenerate(state_, *request);
  if (!generate.ok()) return new RefusedStream(ToGrpcStatus(generate.status()));
  return new GenerateStreamReactor(state_, context, *generate);
}

grpc::ServerWriteReactor<v1::GenerateResponse>* LlmService::Generate(grpc::CallbackServerContext* context,
                                                                     const v1::GenerateRequest* request) {
  if (absl::Status auth = Authorize(state_, context); !auth.ok()) return new RefusedStream(ToGrpcStatus(auth));
  return new GenerateStreamReactor(state_, context, *request);
}

grpc::ServerUnaryReactor* LlmService::Complete(grpc::CallbackServerContext* context,
                                               const v1::GenerateRequest* request,
                                               v1::GenerateResponse* response) {
  if (absl::Status auth = Authorize(state_, context); !auth.ok()) return FinishNow(context, auth);
  return new CompleteReactor(state_, context, *request, response);
}

grpc::ServerUnaryReactor* LlmService::Tokenize(grpc::CallbackServerContext* context,
                                               const v1::TokenizeRequest* request,
                                               v1::TokenizeResponse* response) {
  if (absl::Status auth = Authorize(state_, context); !auth.ok()) return FinishNow(context, auth);
  auto tokenizer = state_.ModelTokenizer();
  if (!tokenizer.ok()) return FinishNow(context, tokenizer.status());
  return FinishNow(context, TokenizeInto(**tokenizer, *request, response));
}

grpc::ServerUnaryReactor* LlmService::Detokenize(grpc::CallbackServerContext* context,
                                                 const v1::DetokenizeRequest* request,
                                                 v1::DetokenizeResponse* response) {
  if (absl::Status auth = Authorize(state_, context); !auth.ok()) return FinishNow(context, auth);
  auto tokenizer = state_.ModelTokenizer();
  if (!tokenizer.ok()) return FinishNow(context, tokenizer.status());
  return FinishNow(context, DetokenizeInto(**tokenizer, *request, response));
}

grpc::ServerUnaryReactor* LlmService::ModelInfo(grpc::CallbackServerContext* context,
                                                const v1::ModelInfoRequest* /*request*/,
                                                v1::ModelInfoResponse* response) {
  if (absl::Status auth = Authorize(state_, context); !auth.ok()) return FinishNow(context, auth);
  absl::StatusOr<v1::ModelInfoResponse> info = state_.ModelInfo();
  if (info.ok()) *response = *std::move(info);
  return FinishNow(context, info.status());
}

}  // namespace llm::server
