#include "server/grpc/grpc_server.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>

#include "absl/strings/str_cat.h"

namespace llm::server {

absl::StatusOr<std::unique_ptr<GrpcServer>> GrpcServer::Start(const GrpcServerOptions& options,
                                                              grpc::Service* service) {
  if (options.port < 0 || options.port > 65535)
    return absl::InvalidArgumentError(absl::StrCat("port ", options.port, " is outside [0, 65535]"));
  if (options.max_message_bytes < 1024 || options.max_message_bytes > INT32_MAX)
    return absl::InvalidArgumentError(absl::StrCat("the message size limit must be in [1024, ", INT32_MAX,
                                                   "] bytes, got ", options.max_message_bytes));
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  auto server = std::unique_ptr<GrpcServer>(new GrpcServer());
  server->host_ = options.host;
  grpc::ServerBuilder builder;
  const std::string address = absl::StrCat(options.host, ":", options.port);
  builder.AddListeningPort(address, grpc::InsecureServerCredentials(), &server->port_);
  builder.RegisterService(service);
  builder.SetMaxReceiveMessageSize(static_cast<int>(options.max_message_bytes));
  builder.SetMaxSendMessageSize(static_cast<int>(options.max_message_bytes));
  server->server_ = builder.BuildAndStart();
  if (!server->server_ || server->port_ == 0)
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", address, " (in use, or not a local address?)"));
  server->SetServing(false);
  return server;
}

GrpcServer::~GrpcServer() { Shutdown(absl::ZeroDuration()); }

std::string GrpcServer::address() const { return absl::StrCat(host_, ":", port_); }

void GrpcServer::SetServing(bool serving) {
  if (!server_) return;
  if (grpc::HealthCheckServiceInterface* health = server_->GetHealthCheckService())
    health->SetServingStatus(serving);
}

void GrpcServer::Shutdown(absl::Duration grace) {
  if (!server_) return;
  SetServing(false);
  server_->Shutdown(absl::ToChronoTime(absl::Now() + grace));
  server_->Wait();
  server_.reset();
}

}  // namespace llm::server
