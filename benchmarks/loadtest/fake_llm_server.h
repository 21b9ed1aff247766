// FakeLlmServer: an llm.v1.Llm server that answers Generate at once, for benchmarking and testing
// the load generator only (it is not a model server: no engine, no scheduling). Each Generate
// streams max_tokens token ids (16 when unset), `tokens_per_message` a message, as fast as
// gRPC takes them, then a last message with finish_reason LENGTH, usage and zero timings.
// ModelInfo describes a made-up model (no tokenizer). Optionally fails every Nth call.
#pragma once

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "llm/v1/llm.grpc.pb.h"

namespace llm::loadtest {

struct FakeServerOptions {
  std::string host = "127.0.0.1";
  int port = 0;  // 0: any free port
  int tokens_per_message = 1;
  int fail_every = 0;  // N > 0: every Nth Generate call fails with RESOURCE_EXHAUSTED (tests)
  int64_t vocab_size = 32000;
  int64_t context_length = 1 << 20;
};

class FakeLlmServer {
 public:
  static absl::StatusOr<std::unique_ptr<FakeLlmServer>> Start(const FakeServerOptions& options);
  ~FakeLlmServer();

  std::string address() const;
  int port() const { return port_; }
  int64_t generate_calls() const;  // Generate calls started so far

 private:
  class Service;
  FakeLlmServer() = default;

  std::string host_;
  int port_ = 0;
  std::unique_ptr<Service> service_;
  std::unique_ptr<grpc::Server> server_;
};

}  // namespace llm::loadtest
