// ServingState: what both front ends (gRPC and the OpenAI-compatible HTTP API) share, so that they
// serve one engine with one policy, one metrics set and one drain. It holds the served model once
// it is loaded (until then every model call is UNAVAILABLE), the operator's policy (API key,
// generation defaults, priority cap), the draining flag (set on SIGTERM: new generations are
// UNAVAILABLE while running ones finish), the set of requests in the engine (so that a drain can
// wait for them, or cancel them when it runs out of time) and the metrics.
#pragma once

#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <optional>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "engine/chat/chat_template.h"
#include "engine/engine.h"
#include "llm/v1/llm.pb.h"
#include "server/grpc/proto_conversion.h"
#include "server/grpc/server_metrics.h"

namespace llm::server {

struct ServedModel {
  std::string name;                            // --served-model-name, else the folder's name
  absl::Time loaded = absl::Now();             // reported as the model's "created" time
  RequestPolicy policy;
  Engine* engine = nullptr;                    // outlives the servers
  std::shared_ptr<const Tokenizer> tokenizer;  // null when the model has none
  v1::ModelInfoResponse info;                  // answered by ModelInfo
  std::shared_ptr<const ChatTemplate> chat_template;  // null when the model has none
};

class ServingState {
 public:
  // `api_key`: when not empty, model calls must present "Bearer <api_key>".
  explicit ServingState(std::string api_key = "") : api_key_(std::move(api_key)) {}

  // The model is loaded: model calls are served from now on.
  void Attach(ServedModel model);
  // New generations are refused with UNAVAILABLE from now on.
  void StartDraining();

  // Converts and submits a generation. `on_output` receives every update, the last one with
  // finished = true (a cancel that happened because `deadline` passed reports kDeadline). The
  // error says why the request was not accepted (UNAVAILABLE, INVALID_ARGUMENT, ...).
  absl::StatusOr<RequestId> SubmitGeneration(const v1::GenerateRequest& request, absl::Time deadline,
                                             OutputCallback on_output);
  void Cancel(RequestId id);

  // OK when the caller's `authorization` (the HTTP header, or the gRPC metadata) is
  // "Bearer <api key>" or no key is set; Unauthenticated otherwise.
  absl::Status Authorize(std::string_view authorization) const;
  // OK while serving; Unavailable while the model loads or the server drains.
  absl::Status Health() const;
  // The served model; null while it loads.
  std::shared_ptr<const ServedModel> Model() const;

  // Waits until no request is in the engine; false when `timeout` passed first.
  bool WaitUntilIdle(absl::Duration timeout);
  // Generation calls (gRPC reactors, HTTP responses) alive: a drain waits for the last ones to deliver their final
  // message before the gRPC server stops (whose own shutdown would also wait for idle client
  // connections to go away).
  void CallStarted();
  void CallDone();
  bool WaitForCallsDone(absl::Duration timeout);
  // Cancels every request in the engine; returns how many.
  int CancelAll();

  absl::StatusOr<v1::ModelInfoResponse> ModelInfo() const;
  // UNAVAILABLE while loading, FAILED_PRECONDITION when the model has no tokenizer.
  absl::StatusOr<std::shared_ptr<const Tokenizer>> ModelTokenizer() const;

  // The token ids of a Chat request's conversation (rendered with the model's chat template,
  // encoded without adding special tokens). UNAVAILABLE while loading; FAILED_PRECONDITION without
  // a template or a tokenizer; INVALID_ARGUMENT when the template fails on the conversation.
  absl::StatusOr<std::vector<int32_t>> RenderChat(const ChatRequest& request) const;

  ServerMetrics& metrics() { return metrics_; }
  std::string RenderMetrics() const;

 private:
  absl::StatusOr<RequestId> Submit(const v1::GenerateRequest& request, absl::Time deadline,
                                   OutputCallback on_output);
  // Bookkeeping of requests in the engine. A request may finish before Submit returns its id, so
  // whichever of Started/Finished comes second removes the entry.
  void Started(RequestId id);
  void Finished(RequestId id);

  const std::string api_key_;
  mutable std::mutex mu_;
  std::condition_variable idle_cv_;
  std::shared_ptr<const ServedModel> model_;
  bool draining_ = false;
  std::map<RequestId, bool> in_engine_;  // id -> finished before Started
  int live_calls_ = 0;
  ServerMetrics metrics_;
};

}  // namespace llm::server
