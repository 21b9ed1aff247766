// GrpcServer: the listening gRPC server around LlmService, with the standard grpc.health.v1
// service (overall status NOT_SERVING until SetServing(true)), server reflection, and message
// size limits (a larger request is rejected with RESOURCE_EXHAUSTED by gRPC itself). TLS when
// given a certificate and key. SO_REUSEPORT is off: a port another process listens on is an
// error ("address already in use"), never two servers answering on one port.
#pragma once

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace llm::server {

struct GrpcServerOptions {
  std::string host = "127.0.0.1";
  int port = 50051;                     // 0: any free port (see GrpcServer::port())
  int64_t max_message_bytes = 4 << 20;  // per message, both directions
  std::string tls_cert_file;            // PEM; TLS when both are set
  std::string tls_key_file;
};

class GrpcServer {
 public:
  // Starts serving `service` (which must outlive the server). Health is NOT_SERVING.
  static absl::StatusOr<std::unique_ptr<GrpcServer>> Start(const GrpcServerOptions& options,
                                                           grpc::Service* service);
  ~GrpcServer();

  int port() const { return port_; }
  std::string address() const;
  bool tls() const { return tls_; }
  // The overall ("") grpc.health.v1 status.
  void SetServing(bool serving);
  // Stops accepting calls and waits up to `grace` for running ones; then cancels what is left.
  void Shutdown(absl::Duration grace);

 private:
  GrpcServer() = default;
  std::unique_ptr<grpc::Service> reflection_v1_;  // outlives server_
  std::unique_ptr<grpc::Server> server_;
  std::string host_;
  int port_ = 0;
  bool tls_ = false;
};

}  // namespace llm::server
