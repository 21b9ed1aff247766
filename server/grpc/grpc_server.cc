#include "server/grpc/grpc_server.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "llm/v1/llm.grpc.pb.h"
#include "server/grpc/reflection_v1_service.h"

namespace llm::server {
namespace {

absl::StatusOr<std::string> ReadPem(const std::string& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::InvalidArgumentError(absl::StrCat("cannot read the TLS ", what, " '", path, "'"));
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// gRPC says only that it could not bind; a plain bind of the same address says why ("Address
// already in use", "Cannot assign requested address", ...).
std::string WhyCannotBind(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  if (getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found) != 0 || !found)
    return "the host name does not resolve";
  std::string why = "unknown reason";
  const int fd = socket(found->ai_family, found->ai_socktype, found->ai_protocol);
  if (fd >= 0) {
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, found->ai_addr, found->ai_addrlen) != 0) why = std::strerror(errno);
    close(fd);
  }
  freeaddrinfo(found);
  for (char& c : why) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return why;
}

}  // namespace

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
  std::shared_ptr<grpc::ServerCredentials> credentials = grpc::InsecureServerCredentials();
  if (options.tls_cert_file.empty() != options.tls_key_file.empty())
    return absl::InvalidArgumentError("TLS needs both --tls-cert and --tls-key");
  if (!options.tls_cert_file.empty()) {
    grpc::SslServerCredentialsOptions ssl;
    grpc::SslServerCredentialsOptions::PemKeyCertPair pair;
    auto cert = ReadPem(options.tls_cert_file, "certificate");
    if (!cert.ok()) return cert.status();
    auto key = ReadPem(options.tls_key_file, "key");
    if (!key.ok()) return key.status();
    pair.cert_chain = *std::move(cert);
    pair.private_key = *std::move(key);
    ssl.pem_key_cert_pairs.push_back(std::move(pair));
    credentials = grpc::SslServerCredentials(ssl);
    server->tls_ = true;
  }
  // Off, so that binding a port some other process listens on fails instead of sharing it.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  // Each stream may have 1 MiB in flight towards us, a fixed window (no bandwidth-delay probing,
  // which grows it to the whole message): 64 clients sending 4 MB prompts at once then take turns
  // with everyone else on the transport threads instead of filling them with 256 MB, and a health
  // check beside them answers within ~40 ms on 2 cores (tests/server/bounded_input_test.cc; ~100-165
  // ms with probing). Requests are small; a 4 MB one needs 4 round trips.
  builder.AddChannelArgument(GRPC_ARG_HTTP2_BDP_PROBE, 0);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, 1 << 20);
  builder.AddListeningPort(address, credentials, &server->port_);
  builder.RegisterService(service);
  // Reflection v1 beside the plugin's v1alpha: the names of what this server serves.
  server->reflection_v1_ = std::make_unique<ReflectionV1Service>(std::vector<std::string>{
      v1::Llm::service_full_name(), "grpc.health.v1.Health", "grpc.reflection.v1.ServerReflection",
      "grpc.reflection.v1alpha.ServerReflection"});
  builder.RegisterService(server->reflection_v1_.get());
  builder.SetMaxReceiveMessageSize(static_cast<int>(options.max_message_bytes));
  builder.SetMaxSendMessageSize(static_cast<int>(options.max_message_bytes));
  server->server_ = builder.BuildAndStart();
  if (!server->server_ || server->port_ == 0)
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", address, ": ", WhyCannotBind(options.host, options.port)));
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
