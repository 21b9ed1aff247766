// Target: the server under test, and how one streamed generation is started on it.
#pragma once

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "llm/v1/llm.grpc.pb.h"
#include "server/loadtest/request_record.h"

namespace llm::loadtest {

using SteadyClock = std::chrono::steady_clock;

// One streamed generation in flight, whichever API carries it.
class StreamCall {
 public:
  // Told, on a client thread, when a call ends: first Forget (the call is about to be deleted:
  // stop using it), then, after the deletion, Record with what it measured.
  class Owner {
   public:
    virtual ~Owner() = default;
    virtual void Forget(StreamCall* call) = 0;
    virtual void Record(RequestRecord record) = 0;
  };
  virtual ~StreamCall() = default;
  // Starts the call (time-stamping its record's send_ns). Once.
  virtual void Start(std::chrono::system_clock::time_point deadline) = 0;
  // Asks the call to stop (it still ends through its owner). Thread-safe.
  virtual void Cancel() = 0;
};

// The server under test, through gRPC (llm.v1 Generate) or through the OpenAI-compatible HTTP
// API (/v1/completions or /v1/chat/completions, streamed as server-sent events).
class Target {
 public:
  // gRPC: `connections` channels to `address` (HOST:PORT), each its own HTTP/2 connection, so
  // that thousands of concurrent streams are not funnelled through one connection's flow
  // control and one I/O thread; calls are spread over them round-robin. Waits up to `timeout`
  // for them and reads the served model's ModelInfo.
  static absl::StatusOr<std::unique_ptr<Target>> Connect(const std::string& address, int connections,
                                                         absl::Duration timeout, const std::string& api_key = "");
  virtual ~Target() = default;

  const std::string& address() const { return address_; }
  // What the workload needs (model, context length, vocabulary size, tokenizer), as far as the
  // API tells it.
  const v1::ModelInfoResponse& model_info() const { return model_info_; }
  virtual int connections() const = 0;
  // Tokens of `text` (the server must have a tokenizer).
  virtual absl::StatusOr<int64_t> CountTokens(const std::string& text, bool add_special_tokens) = 0;
  // One streamed generation of `request`, not started yet; `owner` hears of its end. `origin` is
  // the run's time zero. Thread-safe.
  virtual StreamCall* NewCall(std::shared_ptr<const v1::GenerateRequest> request, RequestRecord record,
                              SteadyClock::time_point origin, StreamCall::Owner* owner) = 0;

 protected:
  std::string address_;
  v1::ModelInfoResponse model_info_;
};

// grpc::Status -> absl::Status with the same code and message.
absl::Status ToAbsl(const grpc::Status& status);
// "RESOURCE_EXHAUSTED", ...
std::string StatusCodeName(grpc::StatusCode code);

}  // namespace llm::loadtest
