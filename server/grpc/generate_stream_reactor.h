// GenerateStreamReactor: one server-streaming Generate call. The engine's updates arrive on the
// engine thread and are merged into a pending message; at most one write is in flight, and the
// next starts from OnWriteDone, so a slow client gets fewer, larger messages and the engine never
// waits. The last update is written together with the call's status. OnCancel (the client
// cancelled, disconnected or its deadline passed) cancels the request in the engine, which frees
// its KV cache blocks within one step.
#pragma once

#include <grpcpp/grpcpp.h>

#include <functional>
#include <mutex>
#include <string>

#include "llm/v1/llm.pb.h"
#include "server/grpc/serving_state.h"

namespace llm::server {

class GenerateStreamReactor final : public grpc::ServerWriteReactor<v1::GenerateResponse> {
 public:
  // Submits the request (a text prompt is tokenized on the preparation pool first); a refused
  // request finishes the call with the reason.
  GenerateStreamReactor(ServingState& state, grpc::CallbackServerContext* context,
                        const v1::GenerateRequest& request);
  // A request that `prepare` builds on the preparation pool (a Chat call's rendered
  // conversation), from an input of `bytes`; `request_id` is echoed in the responses.
  GenerateStreamReactor(ServingState& state, grpc::CallbackServerContext* context, std::string request_id,
                        size_t bytes, std::function<absl::StatusOr<v1::GenerateRequest>()> prepare);

  void OnWriteDone(bool ok) override;
  void OnCancel() override;
  void OnDone() override;

 private:
  void OnOutput(RequestOutput output);  // engine thread
  void OnSubmitted(absl::StatusOr<RequestId> id);
  // With mu_ held and no write in flight: starts writing what is pending, or finishes. Returns
  // the action to take after unlocking.
  enum class Next { kNothing, kWrite, kWriteAndFinish, kFinish };
  Next TakeNextLocked();
  void Perform(Next next);

  ServingState& state_;
  const std::string request_id_;

  std::mutex mu_;
  RequestId id_ = 0;
  bool submitted_ = false;  // id_ is the engine's: cancels go to it
  v1::GenerateResponse pending_;  // merged updates not yet written
  bool has_pending_ = false;
  v1::GenerateResponse in_flight_;  // owned by the write in flight
  bool writing_ = false;
  bool last_received_ = false;  // pending_ holds the last update
  bool client_gone_ = false;    // cancelled or a write failed: skip writes, just finish
  bool finishing_ = false;      // Finish (or StartWriteAndFinish) was called
  grpc::Status final_status_;
};

}  // namespace llm::server
