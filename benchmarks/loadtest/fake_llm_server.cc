#include "benchmarks/loadtest/fake_llm_server.h"

#include <atomic>

#include "absl/strings/str_cat.h"

namespace llm::loadtest {
namespace {

// One Generate stream: writes are chained from OnWriteDone, the last one with the status.
class FakeStream final : public grpc::ServerWriteReactor<v1::GenerateResponse> {
 public:
  FakeStream(const v1::GenerateRequest& request, int tokens_per_message)
      : request_id_(request.request_id()),
        prompt_tokens_(request.token_ids().ids_size()),
        total_(request.stopping().has_max_tokens() ? request.stopping().max_tokens() : 16),
        per_message_(tokens_per_message) {
    WriteNext();
  }

  void OnWriteDone(bool ok) override {
    if (!ok) {
      Finish(grpc::Status(grpc::StatusCode::CANCELLED, "the client went away"));
      return;
    }
    WriteNext();
  }
  void OnDone() override { delete this; }
  void OnCancel() override {}

 private:
  void WriteNext() {
    message_.Clear();
    message_.set_request_id(request_id_);
    const int n = std::min(per_message_, total_ - sent_);
    for (int i = 0; i < n; ++i) message_.add_token_ids((sent_ + i) % 1000);
    sent_ += n;
    if (sent_ < total_) {
      StartWrite(&message_);
      return;
    }
    message_.set_finish_reason(v1::FINISH_REASON_LENGTH);
    message_.mutable_usage()->set_prompt_tokens(prompt_tokens_);
    message_.mutable_usage()->set_completion_tokens(total_);
    message_.mutable_timings();  // all zero: nothing was queued or computed
    StartWriteAndFinish(&message_, grpc::WriteOptions(), grpc::Status::OK);
  }

  const std::string request_id_;
  const int prompt_tokens_;
  const int total_;
  const int per_message_;
  int sent_ = 0;
  v1::GenerateResponse message_;
};

}  // namespace

class FakeLlmServer::Service final : public v1::Llm::CallbackService {
 public:
  explicit Service(const FakeServerOptions& options) : options_(options) {}

  grpc::ServerWriteReactor<v1::GenerateResponse>* Generate(grpc::CallbackServerContext*,
                                                           const v1::GenerateRequest* request) override {
    const int64_t call = calls_.fetch_add(1, std::memory_order_relaxed) + 1;
    if (options_.fail_every > 0 && call % options_.fail_every == 0) {
      auto* reactor = new RejectStream();
      reactor->Finish(grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, "fake: every Nth call fails"));
      return reactor;
    }
    if (request->stopping().has_max_tokens() && request->stopping().max_tokens() < 1) {
      auto* reactor = new RejectStream();
      reactor->Finish(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "max_tokens must be >= 1"));
      return reactor;
    }
    return new FakeStream(*request, options_.tokens_per_message);
  }

  grpc::ServerUnaryReactor* ModelInfo(grpc::CallbackServerContext* context, const v1::ModelInfoRequest*,
                                      v1::ModelInfoResponse* response) override {
    response->set_model("fake");
    response->set_architecture("fake");
    response->set_device("none");
    response->set_context_length(options_.context_length);
    response->set_vocab_size(options_.vocab_size);
    response->set_tensor_parallel_size(1);
    response->set_pipeline_parallel_size(1);
    response->set_has_tokenizer(false);
    auto* reactor = context->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }

  int64_t calls() const { return calls_.load(); }

 private:
  class RejectStream final : public grpc::ServerWriteReactor<v1::GenerateResponse> {
    void OnDone() override { delete this; }
  };

  const FakeServerOptions options_;
  std::atomic<int64_t> calls_{0};
};

absl::StatusOr<std::unique_ptr<FakeLlmServer>> FakeLlmServer::Start(const FakeServerOptions& options) {
  if (options.tokens_per_message < 1) return absl::InvalidArgumentError("tokens_per_message must be >= 1");
  auto server = std::unique_ptr<FakeLlmServer>(new FakeLlmServer());
  server->host_ = options.host;
  server->service_ = std::make_unique<Service>(options);
  grpc::EnableDefaultHealthCheckService(true);  // SERVING at once: the scenario harness waits for it
  grpc::ServerBuilder builder;
  builder.AddListeningPort(absl::StrCat(options.host, ":", options.port), grpc::InsecureServerCredentials(),
                           &server->port_);
  builder.RegisterService(server->service_.get());
  server->server_ = builder.BuildAndStart();
  if (!server->server_ || server->port_ == 0)
    return absl::UnavailableError(absl::StrCat("cannot listen on ", options.host, ":", options.port));
  return server;
}

FakeLlmServer::~FakeLlmServer() {
  if (server_) server_->Shutdown(std::chrono::system_clock::now());
}

std::string FakeLlmServer::address() const { return absl::StrCat(host_, ":", port_); }

int64_t FakeLlmServer::generate_calls() const { return service_->calls(); }

}  // namespace llm::loadtest
