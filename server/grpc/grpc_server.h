// GrpcServer: the listening gRPC server around LlmService, with the standard grpc.health.v1
// service (overall status NOT_SERVING until SetServing(true)), server reflection, and message
// size limits (a larger request is rejected with RESOURCE_EXHAUSTED by gRPC itself).
#pragma once

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace llm::server {

struct GrpcServerOptions {
  std::string host = "0.0.0.0";
  int port = 50051;                     // 0: any free port (see GrpcServer::port())
  int64_t max_message_bytes = 4 << 20;  // per message, both directions
};

class GrpcServer {
 public:
  // Starts serving `service` (which must outlive the server). Health is NOT_SERVING.
  static absl::StatusOr<std::unique_ptr<GrpcServer>> Start(const GrpcServerOptions& options,
                                                           grpc::Service* service);
  ~GrpcServer();

  int port() const { return port_; }
  std::string address() const;
  // The overall ("") grpc.health.v1 status.
  void SetServing(bool serving);
  // Stops accepting calls and waits up to `grace` for running ones; then cancels what is left.
  void Shutdown(absl::Duration grace);

 private:
  GrpcServer() = default;
  std::unique_ptr<grpc::Server> server_;
  std::string host_;
  int port_ = 0;
};

}  // namespace llm::server
