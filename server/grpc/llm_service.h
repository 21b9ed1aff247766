// LlmService: the llm.v1.Llm gRPC service on the callback API. Generate, Chat and Complete hand
// each call to a reactor (GenerateStreamReactor, CompleteReactor; Chat renders its conversation
// with the model's chat template first and then streams as Generate does); ModelInfo answers
// inline. No handler ever waits for the engine, and input work (tokenizing, rendering templates)
// runs on the preparation pool (ServingState), never on gRPC's threads.
#pragma once

#include <functional>

#include "llm/v1/llm.grpc.pb.h"
#include "server/grpc/serving_state.h"

namespace llm::server {

class LlmService final : public v1::Llm::CallbackService {
 public:
  explicit LlmService(ServingState& state) : state_(state) {}

  grpc::ServerWriteReactor<v1::GenerateResponse>* Generate(grpc::CallbackServerContext* context,
                                                           const v1::GenerateRequest* request) override;
  grpc::ServerUnaryReactor* Complete(grpc::CallbackServerContext* context, const v1::GenerateRequest* request,
                                     v1::GenerateResponse* response) override;
  grpc::ServerWriteReactor<v1::GenerateResponse>* Chat(grpc::CallbackServerContext* context,
                                                       const v1::ChatRequest* request) override;
  grpc::ServerUnaryReactor* Tokenize(grpc::CallbackServerContext* context, const v1::TokenizeRequest* request,
                                     v1::TokenizeResponse* response) override;
  grpc::ServerUnaryReactor* Detokenize(grpc::CallbackServerContext* context,
                                       const v1::DetokenizeRequest* request,
                                       v1::DetokenizeResponse* response) override;
  grpc::ServerUnaryReactor* ModelInfo(grpc::CallbackServerContext* context,
                                      const v1::ModelInfoRequest* request,
                                      v1::ModelInfoResponse* response) override;

 private:
  // Finishes the call with what `work` returns, run on the preparation pool (input work never
  // runs on gRPC's threads); ResourceExhausted at once when the pool is full.
  grpc::ServerUnaryReactor* FinishOnPool(grpc::CallbackServerContext* context, size_t bytes,
                                         std::function<absl::Status()> work);

  ServingState& state_;
};

}  // namespace llm::server
