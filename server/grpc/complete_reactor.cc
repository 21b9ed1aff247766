#include "server/grpc/complete_reactor.h"

#include "server/grpc/call_deadline.h"
#include "server/grpc/proto_conversion.h"
#include "server/grpc/status_conversion.h"

namespace llm::server {

CompleteReactor::CompleteReactor(ServingState& state, grpc::CallbackServerContext* context,
                                 const v1::GenerateRequest& request, v1::GenerateResponse* response)
    : state_(state), request_id_(request.request_id()), response_(response) {
  state_.CallStarted();
  state_.SubmitGenerationAsync(
      request, CallDeadline(*context), [this](RequestOutput output) { OnOutput(std::move(output)); },
      [this](absl::StatusOr<RequestId> id) { OnSubmitted(std::move(id)); });
}

void CompleteReactor::OnSubmitted(absl::StatusOr<RequestId> id) {
  if (!id.ok()) {
    Finish(ToGrpcStatus(id.status()));
    return;
  }
  bool cancel = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    id_ = *id;
    submitted_ = true;
    cancel = cancelled_;
  }
  if (cancel) state_.Cancel(*id);
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

void CompleteReactor::OnCancel() {
  RequestId id = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    cancelled_ = true;
    if (!submitted_) return;  // OnSubmitted cancels it
    id = id_;
  }
  state_.Cancel(id);
}

void CompleteReactor::OnDone() {
  ServingState& state = state_;
  delete this;
  state.CallDone();
}

}  // namespace llm::server
