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
#include "server/loadtest/target.h"

namespace llm::loadtest {

class GenerateCall final : public grpc::ClientReadReactor<v1::GenerateResponse>, public StreamCall {
 public:
  // A call not started yet; `origin` is the run's time zero; `api_key` (may be empty) goes into
  // the `authorization` metadata. Start() it once.
  GenerateCall(v1::Llm::Stub* stub, std::shared_ptr<const v1::GenerateRequest> request, RequestRecord record,
               SteadyClock::time_point origin, Owner* owner, const std::string& api_key = "");
  void Start(std::chrono::system_clock::time_point deadline) override;

  // Asks gRPC to cancel the call (it still ends through OnDone). Thread-safe.
  void Cancel() override { context_.TryCancel(); }

  void OnReadDone(bool ok) override;
  void OnDone(const grpc::Status& status) override;

 private:
  int64_t Now() const;

  v1::Llm::Stub* stub_;
  grpc::ClientContext context_;
  std::shared_ptr<const v1::GenerateRequest> request_;
  v1::GenerateResponse response_;
  RequestRecord record_;
  SteadyClock::time_point origin_;
  Owner* owner_;
};

}  // namespace llm::loadtest
