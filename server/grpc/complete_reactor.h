// CompleteReactor: one unary Complete call. Every engine update is appended to the response (so
// it equals the concatenation of what Generate streams); the last one finishes the call.
// OnCancel cancels the request in the engine.
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

  ServingState& state_;
  const std::string request_id_;
  RequestId id_ = 0;
  std::mutex mu_;
  v1::GenerateResponse* response_;  // gRPC's, written until Finish
};

}  // namespace llm::server
