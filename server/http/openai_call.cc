#include "server/http/openai_call.h"

#include <mutex>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/http/http_status.h"
#include "server/http/openai_response.h"

namespace llm::server {
namespace {

constexpr char kJson[] = "application/json";

class OpenAiCall : public std::enable_shared_from_this<OpenAiCall> {
 public:
  OpenAiCall(ServingState& state, std::shared_ptr<const ServedModel> model, OpenAiRequest request,
             std::shared_ptr<HttpResponder> responder)
      : state_(state), model_(std::move(model)), request_(std::move(request)), responder_(std::move(responder)) {
    shape_.chat = request_.chat;
    shape_.id = NewResponseId(request_.chat);
    shape_.created = absl::ToUnixSeconds(absl::Now());
    shape_.model = model_->name;
    shape_.tokenizer = model_->tokenizer.get();
    shape_.logprobs = request_.logprobs;
    shape_.top_logprobs = request_.top_logprobs;
    shape_.include_usage = request_.include_usage;
  }

  void Start() {
    std::vector<v1::GenerateRequest> engine_requests;
    for (const v1::GenerateRequest& prompt : request_.prompts) {
      for (int i = 0; i < request_.n; ++i) {
        v1::GenerateRequest r = prompt;
        // Choices of one seeded request differ from each other and repeat across calls.
        if (r.sampling().has_seed()) r.mutable_sampling()->set_seed(r.sampling().seed() + static_cast<uint64_t>(i));
        engine_requests.push_back(std::move(r));
      }
    }
    choices_.reserve(engine_requests.size());
    for (size_t c = 0; c < engine_requests.size(); ++c) choices_.emplace_back(shape_);
    state_.CallStarted();
    std::weak_ptr<OpenAiCall> weak = weak_from_this();
    responder_->OnClose([weak] {
      if (auto self = weak.lock()) self->CancelAll();
    });
    std::lock_guard<std::mutex> lock(mu_);  // outputs wait until every choice is in (microseconds)
    for (size_t c = 0; c < engine_requests.size(); ++c) {
      auto self = shared_from_this();
      absl::StatusOr<RequestId> id = state_.SubmitGeneration(
          engine_requests[c], absl::InfiniteFuture(),
          [self, c](RequestOutput out) { self->OnOutput(static_cast<int>(c), std::move(out)); });
      if (!id.ok()) {
        failed_ = true;
        for (size_t k = 0; k < c; ++k) state_.Cancel(choices_[k].id);
        responder_->Send(HttpStatusCode(id.status().code()), kJson, OpenAiErrorJson(id.status()));
        state_.CallDone();
        return;
      }
      choices_[c].id = *id;
      choices_[c].submitted = true;
    }
    if (request_.stream) responder_->StartStream(200, "text/event-stream");
  }

 private:
  struct Choice {
    explicit Choice(const ResponseShape& shape) : logprobs(shape) {}
    RequestId id = 0;
    bool submitted = false;
    bool finished = false;
    bool role_sent = false;
    std::string text;
    ChoiceLogprobs logprobs;
    FinishReason reason = FinishReason::kNone;
    int64_t prompt_tokens = 0;
    int64_t cached_prompt_tokens = 0;
    int64_t completion_tokens = 0;
  };

  void CancelAll() {
    std::lock_guard<std::mutex> lock(mu_);
    client_gone_ = true;
    for (const Choice& c : choices_)
      if (c.submitted && !c.finished) state_.Cancel(c.id);
  }

  // Output thread.
  void OnOutput(int index, RequestOutput out) {
    std::lock_guard<std::mutex> lock(mu_);
    Choice& choice = choices_[index];
    if (failed_) return;  // refused as a whole: the others were cancelled and the error sent
    OrderedJson logprobs = choice.logprobs.Append(out.logprobs);
    if (out.finished) {
      choice.finished = true;
      choice.reason = out.finish_reason;
      choice.prompt_tokens = out.prompt_tokens;
      choice.cached_prompt_tokens = out.cached_prompt_tokens;
      choice.completion_tokens = out.completion_tokens;
      if (out.finish_reason == FinishReason::kError && error_.ok())
        error_ = out.status.ok() ? absl::InternalError("generation failed") : out.status;
    }
    if (request_.stream) {
      std::string events;
      const bool role = shape_.chat && !choice.role_sent;
      if (role || !out.text.empty() || !out.token_ids.empty() || (out.finished && out.finish_reason != FinishReason::kError)) {
        choice.role_sent = true;
        const char* reason = out.finished ? OpenAiFinishReason(out.finish_reason) : nullptr;
        if (out.finished && out.finish_reason == FinishReason::kError) reason = nullptr;
        events = SseEvent(ChunkJson(shape_, index, out.text, role, std::move(logprobs), reason));
      }
      if (out.finished && out.finish_reason == FinishReason::kError)
        events += SseEvent(OrderedJson::parse(OpenAiErrorJson(error_)));
      if (!events.empty()) responder_->Write(std::move(events));
    } else {
      choice.text += out.text;
    }
    if (out.finished && ++finished_ == static_cast<int>(choices_.size())) Finish();
  }

  // Every choice has ended (mu_ held).
  void Finish() {
    Usage usage;
    for (size_t c = 0; c < choices_.size(); ++c) {
      // A prompt's tokens count once, however many choices it has.
      if (c % static_cast<size_t>(request_.n) == 0) {
        usage.prompt_tokens += choices_[c].prompt_tokens;
        usage.cached_prompt_tokens += choices_[c].cached_prompt_tokens;
      }
      usage.completion_tokens += choices_[c].completion_tokens;
    }
    if (request_.stream) {
      std::string tail;
      if (request_.include_usage) tail = SseEvent(UsageChunkJson(shape_, usage));
      tail += kSseDone;
      responder_->Write(std::move(tail));
      responder_->End();
    } else if (!error_.ok()) {
      responder_->Send(HttpStatusCode(error_.code()), kJson, OpenAiErrorJson(error_));
    } else {
      std::vector<FinishedChoice> finished;
      for (Choice& c : choices_)
        finished.push_back({std::move(c.text), c.logprobs.all(), OpenAiFinishReason(c.reason)});
      responder_->Send(200, kJson,
                       ResponseJson(shape_, finished, usage)
                           .dump(-1, ' ', false, OrderedJson::error_handler_t::replace));
    }
    state_.CallDone();
  }

  ServingState& state_;
  const std::shared_ptr<const ServedModel> model_;
  const OpenAiRequest request_;
  const std::shared_ptr<HttpResponder> responder_;
  ResponseShape shape_;

  std::mutex mu_;
  std::vector<Choice> choices_;
  int finished_ = 0;
  bool failed_ = false;
  bool client_gone_ = false;
  absl::Status error_;  // the first choice that failed
};

}  // namespace

void StartOpenAiCall(ServingState& state, OpenAiRequest request, std::shared_ptr<HttpResponder> responder) {
  std::shared_ptr<const ServedModel> model = state.Model();
  if (!model) {
    const absl::Status s = state.Health();
    responder->Send(HttpStatusCode(s.code()), kJson, OpenAiErrorJson(s));
    return;
  }
  if (!request.model.empty() && request.model != model->name) {
    const absl::Status s =
        absl::NotFoundError(absl::StrCat("The model `", request.model, "` does not exist; this server serves `",
                                         model->name, "` (see GET /v1/models)"));
    responder->Send(HttpStatusCode(s.code()), kJson, OpenAiErrorJson(s));
    return;
  }
  if (request.chat) {
    absl::StatusOr<std::vector<int32_t>> ids = state.RenderChat(request.conversation);
    if (!ids.ok()) {
      responder->Send(HttpStatusCode(ids.status().code()), kJson, OpenAiErrorJson(ids.status()));
      return;
    }
    v1::GenerateRequest& r = request.prompts.front();
    r.mutable_token_ids()->mutable_ids()->Add(ids->begin(), ids->end());
    // OpenAI's chat default: as long as the context allows.
    if (!request.max_tokens_set) {
      const int64_t room = model->info.context_length() - static_cast<int64_t>(ids->size());
      r.mutable_stopping()->set_max_tokens(static_cast<int32_t>(std::clamp<int64_t>(room, 1, INT32_MAX)));
    }
  }
  auto call = std::make_shared<OpenAiCall>(state, std::move(model), std::move(request), std::move(responder));
  call->Start();
}

}  // namespace llm::server
