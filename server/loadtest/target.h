// Target: the server under test. Several gRPC channels (each its own HTTP/2 connection), so that
// thousands of concurrent streams are not funnelled through one connection's flow control and
// one I/O thread; calls are spread over them round-robin.
#pragma once

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "llm/v1/llm.grpc.pb.h"

namespace llm::loadtest {

class Target {
 public:
  // Connects `connections` channels to `address` (HOST:PORT), waits up to `timeout` for them and
  // reads the served model's ModelInfo.
  static absl::StatusOr<std::unique_ptr<Target>> Connect(const std::string& address, int connections,
                                                         absl::Duration timeout);

  const std::string& address() const { return address_; }
  const v1::ModelInfoResponse& model_info() const { return model_info_; }
  // The next stub, round-robin over the connections. Thread-safe.
  v1::Llm::Stub* NextStub();
  int connections() const { return static_cast<int>(stubs_.size()); }

  // Tokens of `text` (Tokenize RPC; the server must have a tokenizer).
  absl::StatusOr<int64_t> CountTokens(const std::string& text, bool add_special_tokens);

 private:
  std::string address_;
  std::vector<std::shared_ptr<grpc::Channel>> channels_;
  std::vector<std::unique_ptr<v1::Llm::Stub>> stubs_;
  std::atomic<uint64_t> next_{0};
  v1::ModelInfoResponse model_info_;
};

// grpc::Status -> absl::Status with the same code and message.
absl::Status ToAbsl(const grpc::Status& status);
// "RESOURCE_EXHAUSTED", ...
std::string StatusCodeName(grpc::StatusCode code);

}  // namespace llm::loadtest
