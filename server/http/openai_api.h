// OpenAiApi: the routes of the HTTP port, answering as an OpenAI-compatible server:
//   POST /v1/completions, POST /v1/chat/completions   (OpenAiCall; API key when set)
//   GET  /v1/models, GET /v1/models/{id}                (the served model; API key when set)
//   GET  /health    200 while serving, 503 while the model loads or the server drains (no key)
//   GET  /metrics   Prometheus text format (no key; also on --metrics-port)
// Anything else is 404 (405 for a known path with another method), in OpenAI's error shape.
#pragma once

#include <memory>

#include "server/grpc/serving_state.h"
#include "server/http/http_server.h"

namespace llm::server {

class OpenAiApi {
 public:
  explicit OpenAiApi(ServingState& state) : state_(state) {}

  // The HttpServer handler: runs on an I/O thread and never waits for the engine.
  void Handle(HttpRequest request, std::shared_ptr<HttpResponder> responder);
  // The handler of a metrics-only port: /metrics and /health.
  void HandleMetricsOnly(HttpRequest request, std::shared_ptr<HttpResponder> responder);

 private:
  void Models(const HttpRequest& request, HttpResponder& responder);

  ServingState& state_;
};

}  // namespace llm::server
