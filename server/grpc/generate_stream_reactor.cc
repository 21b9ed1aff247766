#include "server/grpc/generate_stream_reactor.h"

#include "server/grpc/call_deadline.h"
#include "server/grpc/proto_conversion.h"
#include "server/grpc/status_conversion.h"

namespace llm::server {

GenerateStreamReactor::GenerateStreamReactor(ServingState& state, grpc::CallbackServerContext* context,
                                             const v1::GenerateRequest& request)
    : state_(state), request_id_(request.request_id()) {
  state_.CallStarted();
  state_.SubmitGenerationAsync(
      request, CallDeadline(*context), [this](RequestOutput output) { OnOutput(std::move(output)); },
      [this](absl::StatusOr<RequestId> id) { OnSubmitted(std::move(id)); });
}

GenerateStreamReactor::GenerateStreamReactor(ServingState& state, grpc::CallbackServerContext* context,
                                             std::string request_id, size_t bytes,
                                             std::function<absl::StatusOr<v1::GenerateRequest>()> prepare)
    : state_(state), request_id_(std::move(request_id)) {
  state_.CallStarted();
  state_.SubmitPreparedAsync(
      bytes, std::move(prepare), CallDeadline(*context),
      [this](RequestOutput output) { OnOutput(std::move(output)); },
      [this](absl::StatusOr<RequestId> id) { OnSubmitted(std::move(id)); });
}

void GenerateStreamReactor::OnSubmitted(absl::StatusOr<RequestId> id) {
  bool cancel = false;
  Next next = Next::kNothing;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (id.ok()) {
      id_ = *id;
      submitted_ = true;
      cancel = client_gone_;  // it went while the request was being prepared
    } else if (!finishing_) {
      // Refused: nothing was or will be written.
      final_status_ = ToGrpcStatus(id.status());
      finishing_ = true;
      next = Next::kFinish;
    }
  }
  if (cancel) state_.Cancel(id_);
  Perform(next);
}

void GenerateStreamReactor::OnOutput(RequestOutput output) {
  Next next;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (pending_.request_id().empty())
      pending_.set_request_id(request_id_.empty() ? std::to_string(output.id) : request_id_);
    AppendOutput(output, &pending_);
    has_pending_ = true;
    if (output.finished) {
      last_received_ = true;
      final_status_ = ToGrpcStatus(FinishStatus(output));
    }
    next = writing_ ? Next::kNothing : TakeNextLocked();
  }
  Perform(next);
}

void GenerateStreamReactor::OnWriteDone(bool ok) {
  Next next;
  bool cancel = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    writing_ = false;
    if (!ok) client_gone_ = true;
    cancel = !ok && submitted_;
    next = TakeNextLocked();
  }
  if (cancel) state_.Cancel(id_);
  Perform(next);
}

void GenerateStreamReactor::OnCancel() {
  bool cancel = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    client_gone_ = true;
    cancel = submitted_;  // otherwise OnSubmitted cancels it
  }
  if (cancel) state_.Cancel(id_);  // its last update (kCancelled or kDeadline) then finishes the call
}

GenerateStreamReactor::Next GenerateStreamReactor::TakeNextLocked() {
  if (finishing_) return Next::kNothing;
  if (client_gone_) {
    if (!last_received_) return Next::kNothing;
    finishing_ = true;
    return Next::kFinish;
  }
  if (!has_pending_) return Next::kNothing;
  in_flight_.Clear();
  in_flight_.Swap(&pending_);
  has_pending_ = false;
  if (last_received_) {
    finishing_ = true;
    return Next::kWriteAndFinish;
  }
  writing_ = true;
  return Next::kWrite;
}

void GenerateStreamReactor::Perform(Next next) {
  // No lock held: a reaction may run before these return. in_flight_ and final_status_ are not
  // touched by anyone else until the write completes.
  switch (next) {
    case Next::kNothing:
      break;
    case Next::kWrite:
      StartWrite(&in_flight_);
      break;
    case Next::kWriteAndFinish:
      StartWriteAndFinish(&in_flight_, grpc::WriteOptions(), final_status_);
      break;
    case Next::kFinish:
      Finish(final_status_);
      break;
  }
}

void GenerateStreamReactor::OnDone() {
  ServingState& state = state_;
  delete this;
  state.CallDone();
}

}  // namespace llm::server
