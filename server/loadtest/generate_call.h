// GenerateCall: one streamed Generate call on gRPC's callback API. Nothing blocks: gRPC's threads
// run OnReadDone for each message (time-stamped on arrival) and OnDone at the end, which hands
// the record to the owner's callback and deletes the call. Many thousands can be in flight from
// one thread that only starts them.
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <functional>
#include <memory>

#include "llm/v1/llm.grpc.pb.h"
#include "server/loadtest/request_record.h"

namespace llm::loadtest {

using SteadyClock = std::chrono::steady_clock;

class GenerateCall final : public grpc::ClientReadReactor<v1::GenerateResponse> {
 public:
  // Called once, on a gRPC thread, when the call ended; `call` is deleted right after.
  using DoneFn = std::function<void(GenerateCall* call, RequestRecord record)>;

  // A call not started yet; `origin` is the run's time zero. Start() it once.
  GenerateCall(std::shared_ptr<const v1::GenerateRequest> request, RequestRecord record,
               SteadyClock::time_point origin, const DoneFn* done);
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
  const DoneFn* done_;
};

}  // namespace llm::loadtest
