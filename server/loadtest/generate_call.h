// GenerateCall: one streamed Generate call on gRPC's callback API. Nothing blocks: gRPC's threads
// run OnReadDone for each message (time-stamped on arrival) and OnDone at the end, which deletes
// the call and hands its record to the owner. Many thousands can be in flight from one thread
// that only starts them.
//
// The call (its ClientContext, which holds the last reference to the gRPC call and one to the
// channel) is deleted before the owner hears of the record, so an owner that waits for every
// record knows that no gRPC call object is left: the channels may then be released from the
// owner's thread, never from inside a gRPC callback thread.
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <memory>

#include "llm/v1/llm.grpc.pb.h"
#include "server/loadtest/request_record.h"

namespace llm::loadtest {

using SteadyClock = std::chrono::steady_clock;

class GenerateCall final : public grpc::ClientReadReactor<v1::GenerateResponse> {
 public:
  // Told, on a gRPC thread, when a call ends: first Forget (the call is about to be deleted:
  // stop using it), then, after the deletion, Record with what it measured.
  class Owner {
   public:
    virtual ~Owner() = default;
    virtual void Forget(GenerateCall* call) = 0;
    virtual void Record(RequestRecord record) = 0;
  };

  // A call not started yet; `origin` is the run's time zero. Start() it once.
  GenerateCall(std::shared_ptr<const v1::GenerateRequest> request, RequestRecord record,
               SteadyClock::time_point origin, Owner* owner);
  // Starts the call (time-stamping record.send_ns).
  void Start(v1::Llm::Stub* stub, std::chrono::system_clock::time_point deadline);

  // Asks gRPC to cancel the call (it still ends through OnDone). Thread-safe.
  void Cancel() { context_.TryCancel(); }

  void OnReadDone(bool ok) override;
  void OnDone(const grpc::Status& status) override;

 private:
  int64_t Now() const;

  grpc::ClientContext context_;
  std::shared_ptr<const v1::GenerateRequest> request_;
  v1::GenerateResponse response_;
  RequestRecord record_;
  SteadyClock::time_point origin_;
  Owner* owner_;
};

}  // namespace llm::loadtest
