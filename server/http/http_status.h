// The one place where absl::Status (what the engine, ServingState and the request parsers return)
// becomes an HTTP status and OpenAI's error body, as the OpenAI SDKs read them:
//   {"error": {"message": "...", "type": "invalid_request_error", "param": null, "code": null}}
// (the SDKs raise BadRequestError for 400, AuthenticationError 401, NotFoundError 404,
// RateLimitError 429, InternalServerError for 5xx, from the status; `message` is shown).
#pragma once

#include <string>

#include "absl/status/status.h"

namespace llm::server {

// 400 invalid input, 401 missing/bad API key, 403, 404 unknown model or path, 413 too large,
// 429 queue full, 499 cancelled by the client, 500 internal, 501 unimplemented, 503 loading or
// draining, 504 deadline.
int HttpStatusCode(absl::StatusCode code);

// OpenAI's error object for `status` (not OK), serialized.
std::string OpenAiErrorJson(const absl::Status& status);

}  // namespace llm::server
