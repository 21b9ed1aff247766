#include "server/http/openai_api.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "server/http/http_status.h"
#include "server/http/openai_call.h"
#include "server/http/openai_request.h"

namespace llm::server {
namespace {

constexpr char kJson[] = "application/json";
constexpr char kPrometheus[] = "text/plain; version=0.0.4; charset=utf-8";

void SendError(HttpResponder& responder, const absl::Status& status) {
  responder.Send(HttpStatusCode(status.code()), kJson, OpenAiErrorJson(status));
}

bool Route(const HttpRequest& request, const char* method, const std::string& path, HttpResponder& responder,
           bool* handled) {
  if (request.path != path) return false;
  *handled = true;
  if (request.method == method) return true;
  responder.Send(405, kJson,
                 OpenAiErrorJson(absl::InvalidArgumentError(
                     absl::StrCat(request.method, " is not allowed on ", path, "; use ", method))));
  return false;
}

// GET /health and /metrics, on both ports.
bool HandleOperational(ServingState& state, const HttpRequest& request, HttpResponder& responder) {
  bool handled = false;
  if (Route(request, "GET", "/health", responder, &handled)) {
    const absl::Status health = state.Health();
    if (health.ok()) {
      responder.Send(200, kJson, "{}");
    } else {
      SendError(responder, health);
    }
  } else if (Route(request, "GET", "/metrics", responder, &handled)) {
    responder.Send(200, kPrometheus, state.RenderMetrics());
  }
  return handled;
}

}  // namespace

void OpenAiApi::Handle(HttpRequest request, std::shared_ptr<HttpResponder> responder) {
  if (HandleOperational(state_, request, *responder)) return;
  if (!absl::StartsWith(request.path, "/v1/")) {
    SendError(*responder, absl::NotFoundError(absl::StrCat("no route ", request.method, " ", request.path)));
    return;
  }
  if (absl::Status auth = state_.Authorize(request.Header("authorization")); !auth.ok()) {
    SendError(*responder, auth);
    return;
  }
  bool handled = false;
  if (Route(request, "POST", "/v1/completions", *responder, &handled)) {
    absl::StatusOr<OpenAiRequest> parsed = ParseCompletionRequest(request.body);
    if (!parsed.ok()) return SendError(*responder, parsed.status());
    StartOpenAiCall(state_, *std::move(parsed), std::move(responder));
  } else if (Route(request, "POST", "/v1/chat/completions", *responder, &handled)) {
    absl::StatusOr<OpenAiRequest> parsed = ParseChatCompletionRequest(request.body);
    if (!parsed.ok()) return SendError(*responder, parsed.status());
    StartOpenAiCall(state_, *std::move(parsed), std::move(responder));
  } else if (!handled && (request.path == "/v1/models" || absl::StartsWith(request.path, "/v1/models/"))) {
    Models(request, *responder);
  } else if (!handled) {
    SendError(*responder, absl::NotFoundError(absl::StrCat("no route ", request.method, " ", request.path)));
  }
}

void OpenAiApi::Models(const HttpRequest& request, HttpResponder& responder) {
  if (request.method != "GET") {
    responder.Send(405, kJson, OpenAiErrorJson(absl::InvalidArgumentError("use GET on /v1/models")));
    return;
  }
  std::shared_ptr<const ServedModel> model = state_.Model();
  if (!model) return SendError(responder, state_.Health());
  nlohmann::ordered_json card = {{"id", model->name},
                                 {"object", "model"},
                                 {"created", absl::ToUnixSeconds(model->loaded)},
                                 {"owned_by", "llm"},
                                 {"root", model->name},
                                 {"parent", nullptr},
                                 {"max_model_len", model->info.context_length()},
                                 {"vocab_size", model->info.vocab_size()}};
  if (request.path == "/v1/models") {
    responder.Send(200, kJson, nlohmann::ordered_json({{"object", "list"}, {"data", {card}}}).dump());
    return;
  }
  const std::string id = request.path.substr(std::string_view("/v1/models/").size());
  if (id != model->name)
    return SendError(responder, absl::NotFoundError(absl::StrCat("The model `", id, "` does not exist")));
  responder.Send(200, kJson, card.dump());
}

void OpenAiApi::HandleMetricsOnly(HttpRequest request, std::shared_ptr<HttpResponder> responder) {
  if (HandleOperational(state_, request, *responder)) return;
  SendError(*responder, absl::NotFoundError(absl::StrCat("no route ", request.method, " ", request.path,
                                                         " (this port serves /metrics and /health)")));
}

}  // namespace llm::server
