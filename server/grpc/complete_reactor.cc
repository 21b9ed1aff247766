#include "server/grpc/complete_reactor.h"

#include "server/grpc/call_deadline.h"
#include "server/grpc/proto_conversion.h"
#include "server/grpc/status_conversion.h"

namespace llm::server {

CompleteReactor::CompleteReactor(ServingState& state, grpc::CallbackServerContext* context,
                                 const v1::GenerateRequest& request, v1::GenerateResponse* response)
    : state_(state), request_id_(request.request_id()), response_(response) {
  state_.CallStarted();
  absl::StatusOr<RequestId> id = state_.SubmitGeneration(
      request, CallDeadline(*context), [this](RequestOutput output) { OnOutput(std::move(output)); });
  if (!id.ok()) {
    Finish(ToGrpcStatus(id.status()));
    return;
  }
  id_ = *id;
}

void CompleteReactor::OnOutput(RequestOutput output) {
  grpc::Status status;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (response_->request_id().empty())
      response_->set_request_id(request_id_.empty() ? std::to_string(output.id) : request_id_);
    AppendOutput(output, response_);
    if (!output.finished) return;
    status = ToGrpcStatus(FinishStatus(output));
  }
  Finish(status);
}

void CompleteReactor::OnCancel() { state_.Cancel(id_); }

void CompleteReactor::OnDone() {
  ServingState& state = state_;
  delete this;
  state.CallDone();
}

}  // namespace llm::server
