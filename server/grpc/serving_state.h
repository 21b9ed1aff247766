// ServingState: what both front ends (gRPC and the OpenAI-compatible HTTP API) share, so that they
// serve one engine with one policy, one metrics set and one drain. It holds the served model once
// it is loaded (until then every model call is UNAVAILABLE), the operator's policy (API key,
// generation defaults, priority cap), the draining flag (set on SIGTERM: new generations are
// UNAVAILABLE while running ones finish), the set of requests in the engine (so that a drain can
// wait for them, or cancel them when it runs out of time) and the metrics.
#pragma once

#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "engine/chat/chat_template.h"
#include "engine/engine.h"
#include "llm/v1/llm.pb.h"
#include "server/grpc/preparation_pool.h"
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

// The preparation pool's size (PreparationPool).
struct PreparationOptions {
  int threads = 0;                     // 0: half the cores, at least 1, at most 4
  int max_jobs = 256;                  // queued requests before new ones are refused
  size_t max_bytes = size_t{256} << 20;  // their input bytes before new ones are refused
};

class ServingState {
 public:
  // `api_key`: when not empty, model calls must present "Bearer <api_key>".
  explicit ServingState(std::string api_key = "", const PreparationOptions& preparation = {});

  // What became of a submission: the engine's id, or why it was refused.
  using Submitted = std::function<void(absl::StatusOr<RequestId>)>;

  // The model is loaded: model calls are served from now on.
  void Attach(ServedModel model);
  // New generations are refused with UNAVAILABLE from now on.
  void StartDraining();

  // Converts and submits a generation. `on_output` receives every update, the last one with
  // finished = true (a cancel that happened because `deadline` passed reports kDeadline). The
  // error says why the request was not accepted (UNAVAILABLE, INVALID_ARGUMENT, ...).
  absl::StatusOr<RequestId> SubmitGeneration(const v1::GenerateRequest& request, absl::Time deadline,
                                             OutputCallback on_output);
  // The same without blocking the calling (gRPC) thread on input work: a text prompt is first
  // checked against the context by its size alone (refused at once when it cannot fit), then
  // tokenized and submitted on the preparation pool. `on_submitted` is called exactly once, here
  // (token ids, an early refusal, a full pool) or on a pool thread.
  void SubmitGenerationAsync(const v1::GenerateRequest& request, absl::Time deadline, OutputCallback on_output,
                             Submitted on_submitted);
  // For a request that `prepare` builds on the pool (a Chat's rendered conversation), whose input
  // weighs `bytes`.
  void SubmitPreparedAsync(size_t bytes, std::function<absl::StatusOr<v1::GenerateRequest>()> prepare,
                           absl::Time deadline, OutputCallback on_output, Submitted on_submitted);
  // Runs `job` on the preparation pool (parsing an HTTP body, tokenizing); ResourceExhausted when
  // the pool is full (counted as a rejected request).
  absl::Status Prepare(size_t bytes, std::function<void()> job);
  void Cancel(RequestId id);

  // OK when the caller's `authorization` (the HTTP header, or the gRPC metadata) is
  // "Bearer <api key>" or no key is set; Unauthenticated otherwise.
  absl::Status Authorize(std::string_view authorization) const;
  // OK while serving; Unavailable while the model loads, the server drains, or no replica of the
  // engine runs steps (Engine::Health).
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
  PreparationPool pool_;  // last: its threads end before the state they use
};

}  // namespace llm::server
