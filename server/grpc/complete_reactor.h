// CompleteReactor: one unary Complete call. Every engine update is appended to the response (so
// it equals the concatenation of what Generate streams); the last one finishes the call.
// OnCancel cancels the request in the engine (once it is there: a text prompt is tokenized on
// the preparation pool first, ServingState::SubmitGenerationAsync).
#pragma once

#include <grpcpp/grpcpp.h>

#include <mutex>

#include "llm/v1/llm.pb.h"
#include "server/grpc/serving_state.h"

namespace llm::server {

class CompleteReactor final : public grpc::ServerUnaryReactor {
 public:
  CompleteReactor(ServingState& state, grpc::CallbackServerContext* context,
                  const v1::GenerateRequest& request, v1::GenerateResponse* response);

  void OnCancel() override;
  void OnDone() override;

 private:
  void OnOutput(RequestOutput output);  // engine thread
  void OnSubmitted(absl::StatusOr<RequestId> id);

  ServingState& state_;
  const std::string request_id_;
  std::mutex mu_;
  RequestId id_ = 0;
  bool submitted_ = false;  // id_ is the engine's
  bool cancelled_ = false;  // OnCancel came: cancel once submitted
  v1::GenerateResponse* response_;  // gRPC's, written until Finish
};

}  // namespace llm::server
