// The deadline of a gRPC call as an absl::Time (absl::InfiniteFuture() when the client set none).
#pragma once

#include <grpcpp/server_context.h>

#include "absl/time/time.h"

namespace llm::server {

inline absl::Time CallDeadline(const grpc::CallbackServerContext& context) {
  const auto deadline = context.deadline();
  if (deadline == std::chrono::system_clock::time_point::max()) return absl::InfiniteFuture();
  return absl::FromChrono(deadline);
}

}  // namespace llm::server
