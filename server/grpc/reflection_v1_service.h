// ReflectionV1Service: gRPC server reflection v1 (grpc.reflection.v1.ServerReflection) beside
// the v1alpha service that grpc++_reflection provides, so that clients asking v1 first (grpcurl,
// grpc_cli, Postman) need no fallback. It answers from the descriptors linked into this binary:
// the services it was given, and each file with the files it imports.
#pragma once

#include <grpcpp/grpcpp.h>

#include <string>
#include <vector>

#include "grpc/reflection/v1/reflection.grpc.pb.h"

namespace llm::server {

class ReflectionV1Service final : public grpc::reflection::v1::ServerReflection::CallbackService {
 public:
  // `services`: the full names list_services answers.
  explicit ReflectionV1Service(std::vector<std::string> services) : services_(std::move(services)) {}

  grpc::ServerBidiReactor<grpc::reflection::v1::ServerReflectionRequest,
                          grpc::reflection::v1::ServerReflectionResponse>*
  ServerReflectionInfo(grpc::CallbackServerContext* context) override;

  // The answer to one request (exposed for the reactor).
  grpc::reflection::v1::ServerReflectionResponse Answer(
      const grpc::reflection::v1::ServerReflectionRequest& request) const;

 private:
  std::vector<std::string> services_;
};

}  // namespace llm::server
