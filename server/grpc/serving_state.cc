#include "server/grpc/serving_state.h"

#include <vector>

#include "absl/strings/match.h"

namespace llm::server {

void ServingState::Attach(ServedModel model) {
  std::lock_guard<std::mutex> lock(mu_);
  model_ = std::make_shared<const ServedModel>(std::move(model));
}

void ServingState::StartDraining() {
  std::lock_guard<std::mutex> lock(mu_);
  draining_ = true;
}

std::shared_ptr<const ServedModel> ServingState::Model() const {
  std::lock_guard<std::mutex> lock(mu_);
  return model_;
}

absl::StatusOr<RequestId> ServingState::SubmitGeneration(const v1::GenerateRequest& request,
                                                         absl::Time deadline, OutputCallback on_output) {
  absl::StatusOr<RequestId> id = Submit(request, deadline, std::move(on_output));
  if (!id.ok()) {
    metrics_.RecordRejected(id.status().code());
    return id.status();
  }
  Started(*id);
  return id;
}

absl::StatusOr<RequestId> ServingState::Submit(const v1::GenerateRequest& request, absl::Time deadline,
                                               OutputCallback on_output) {
  std::shared_ptr<const ServedModel> model;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (draining_) return absl::UnavailableError("the server is shutting down and accepts no new requests");
    if (!model_) return absl::UnavailableError("the model is still loading");
    model = model_;
  }
  absl::StatusOr<GenerateRequest> converted =
      ToEngineRequest(request, model->tokenizer.get(), deadline, model->policy);
  if (!converted.ok()) return converted.status();
  // Runs on the engine thread: bookkeeping and metrics, then the caller's callback.
  OutputCallback callback = [this, deadline, recorder = RequestMetricsRecorder(metrics_),
                             on_output = std::move(on_output)](RequestOutput out) mutable {
    if (out.finished && out.finish_reason == FinishReason::kCancelled && absl::Now() >= deadline)
      out.finish_reason = FinishReason::kDeadline;
    recorder.OnOutput(out);
    const bool finished = out.finished;
    const RequestId id = out.id;
    on_output(std::move(out));
    if (finished) Finished(id);
  };
  return model->engine->Submit(*std::move(converted), std::move(callback));
}

absl::Status ServingState::Authorize(std::string_view authorization) const {
  if (api_key_.empty()) return absl::OkStatus();
  constexpr std::string_view kScheme = "Bearer ";
  if (!absl::StartsWithIgnoreCase(absl::string_view(authorization.data(), authorization.size()),
                                  absl::string_view(kScheme.data(), kScheme.size())))
    return absl::UnauthenticatedError("this server needs an API key: send the header 'Authorization: Bearer <key>'");
  std::string_view presented = authorization.substr(kScheme.size());
  // Compared in time independent of where the first difference is.
  unsigned char diff = presented.size() == api_key_.size() ? 0 : 1;
  for (size_t i = 0; i < presented.size(); ++i)
    diff |= static_cast<unsigned char>(presented[i] ^ api_key_[i % api_key_.size()]);
  if (diff != 0) return absl::UnauthenticatedError("invalid API key");
  return absl::OkStatus();
}

absl::Status ServingState::Health() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (draining_) return absl::UnavailableError("the server is shutting down");
  if (!model_) return absl::UnavailableError("the model is still loading");
  return absl::OkStatus();
}

void ServingState::Cancel(RequestId id) {
  if (auto model = Model()) model->engine->Cancel(id);
}

void ServingState::Started(RequestId id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto [it, inserted] = in_engine_.try_emplace(id, false);
  if (!inserted) in_engine_.erase(it);  // it had finished already
  if (in_engine_.empty()) idle_cv_.notify_all();
}

void ServingState::Finished(RequestId id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto [it, inserted] = in_engine_.try_emplace(id, true);
  if (!inserted) in_engine_.erase(it);
  if (in_engine_.empty()) idle_cv_.notify_all();
}

bool ServingState::WaitUntilIdle(absl::Duration timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  return idle_cv_.wait_for(lock, absl::ToChronoNanoseconds(timeout), [&] { return in_engine_.empty(); });
}

void ServingState::CallStarted() {
  std::lock_guard<std::mutex> lock(mu_);
  ++live_calls_;
}

void ServingState::CallDone() {
  std::lock_guard<std::mutex> lock(mu_);
  if (--live_calls_ == 0) idle_cv_.notify_all();
}

bool ServingState::WaitForCallsDone(absl::Duration timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  return idle_cv_.wait_for(lock, absl::ToChronoNanoseconds(timeout), [&] { return live_calls_ == 0; });
}

int ServingState::CancelAll() {
  std::vector<RequestId> ids;
  std::shared_ptr<const ServedModel> model;
  {
    std::lock_guard<std::mutex> lock(mu_);
    model = model_;
    for (const auto& [id, finished_first] : in_engine_)
      if (!finished_first) ids.push_back(id);
  }
  if (model)
    for (RequestId id : ids) model->engine->Cancel(id);
  return static_cast<int>(ids.size());
}

absl::StatusOr<v1::ModelInfoResponse> ServingState::ModelInfo() const {
  auto model = Model();
  if (!model) return absl::UnavailableError("the model is still loading");
  return model->info;
}

absl::StatusOr<std::shared_ptr<const Tokenizer>> ServingState::ModelTokenizer() const {
  auto model = Model();
  if (!model) return absl::UnavailableError("the model is still loading");
  if (!model->tokenizer)
    return absl::FailedPreconditionError("this model has no tokenizer (no tokenizer.json)");
  return model->tokenizer;
}

absl::StatusOr<std::vector<int32_t>> ServingState::RenderChat(const ChatRequest& request) const {
  auto model = Model();
  if (!model) return absl::UnavailableError("the model is still loading");
  if (!model->chat_template)
    return absl::FailedPreconditionError("this model has no chat template (start the server with --chat-template FILE)");
  if (!model->tokenizer) return absl::FailedPreconditionError("this model has no tokenizer (no tokenizer.json)");
  return model->chat_template->RenderIds(request, *model->tokenizer);
}

std::string ServingState::RenderMetrics() const {
  auto model = Model();
  if (!model) return metrics_.Render("", std::nullopt, nullptr);
  return metrics_.Render(model->name, model->engine->stats(), &model->engine->info(),
                         &model->engine->step_metrics());
}

}  // namespace llm::server
