#include "server/http/http_status.h"

#include "nlohmann/json.hpp"

namespace llm::server {
namespace {

// OpenAI's error "type" for an HTTP status.
const char* ErrorType(int http_status) {
  switch (http_status) {
    case 400:
    case 413:
      return "invalid_request_error";
    case 401:
      return "authentication_error";
    case 403:
      return "permission_error";
    case 404:
      return "not_found_error";
    case 429:
      return "rate_limit_error";
    case 503:
      return "service_unavailable_error";
    default:
      return http_status >= 500 ? "server_error" : "invalid_request_error";
  }
}

}  // namespace

int HttpStatusCode(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kOk:
      return 200;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kFailedPrecondition:  // e.g. text asked of a model without a tokenizer
    case absl::StatusCode::kOutOfRange:
    case absl::StatusCode::kAlreadyExists:
      return 400;
    case absl::StatusCode::kUnauthenticated:
      return 401;
    case absl::StatusCode::kPermissionDenied:
      return 403;
    case absl::StatusCode::kNotFound:
      return 404;
    case absl::StatusCode::kResourceExhausted:
      return 429;
    case absl::StatusCode::kCancelled:
      return 499;
    case absl::StatusCode::kUnimplemented:
      return 501;
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kAborted:
      return 503;
    case absl::StatusCode::kDeadlineExceeded:
      return 504;
    default:
      return 500;
  }
}

std::string OpenAiErrorJson(const absl::Status& status) {
  const int http = HttpStatusCode(status.code());
  nlohmann::ordered_json error = {{"message", std::string(status.message())},
                          {"type", ErrorType(http)},
                          {"param", nullptr},
                          {"code", http == 404 ? nlohmann::ordered_json("not_found") : nlohmann::ordered_json(nullptr)}};
  return nlohmann::ordered_json({{"error", error}}).dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

}  // namespace llm::server
