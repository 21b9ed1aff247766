// ServingState: what the gRPC handlers share. It holds the served model once it is loaded (until
// then every model call is UNAVAILABLE), the draining flag (set on SIGTERM: new generations are
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
#include "server/grpc/server_metrics.h"

namespace llm::server {

struct ServedModel {
  Engine* engine = nullptr;                    // outlives the gRPC server
  std::shared_ptr<const Tokenizer> tokenizer;  // null when the model has none
  v1::ModelInfoResponse info;                  // answered by ModelInfo
  std::shared_ptr<const ChatTemplate> chat_template;  // null when the model has none
};

class ServingState {
 public:
  ServingState() = default;

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

  // Waits until no request is in the engine; false when `timeout` passed first.
  bool WaitUntilIdle(absl::Duration timeout);
  // Generation calls (reactors) alive: a drain waits for the last ones to deliver their final
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
  std::shared_ptr<const ServedModel> Model() const;
  absl::StatusOr<RequestId> Submit(const v1::GenerateRequest& request, absl::Time deadline,
                                   OutputCallback on_output);
  // Bookkeeping of requests in the engine. A request may finish before Submit returns its id, so
  // whichever of Started/Finished comes second removes the entry.
  void Started(RequestId id);
  void Finished(RequestId id);

  mutable std::mutex mu_;
  std::condition_variable idle_cv_;
  std::shared_ptr<const ServedModel> model_;
  bool draining_ = false;
  std::map<RequestId, bool> in_engine_;  // id -> finished before Started
  int live_calls_ = 0;
  ServerMetrics metrics_;
};

}  // namespace llm::server
