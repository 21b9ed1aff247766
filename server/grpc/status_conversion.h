// The one place where absl::Status (what the engine and the server's own checks return) becomes
// grpc::Status (what a client receives). Codes map one to one; the message is kept.
#pragma once

#include <grpcpp/support/status.h>

#include "absl/status/status.h"

namespace llm::server {

grpc::Status ToGrpcStatus(const absl::Status& status);

}  // namespace llm::server
