#include "server/loadtest/target.h"

#include "absl/strings/str_cat.h"
#include "server/loadtest/generate_call.h"

namespace llm::loadtest {
namespace {

class GrpcTarget final : public Target {
 public:
  static absl::StatusOr<std::unique_ptr<Target>> Connect(const std::string& address, int connections,
                                                         absl::Duration timeout, const std::string& api_key);
  int connections() const override { return static_cast<int>(stubs_.size()); }
  absl::StatusOr<int64_t> CountTokens(const std::string& text, bool add_special_tokens) override;
  StreamCall* NewCall(std::shared_ptr<const v1::GenerateRequest> request, RequestRecord record,
                      SteadyClock::time_point origin, StreamCall::Owner* owner) override {
    return new GenerateCall(NextStub(), std::move(request), std::move(record), origin, owner, api_key_);
  }

 private:
  v1::Llm::Stub* NextStub();
  void Prepare(grpc::ClientContext& context) const {
    if (!api_key_.empty()) context.AddMetadata("authorization", "Bearer " + api_key_);
  }

  std::string api_key_;
  std::vector<std::shared_ptr<grpc::Channel>> channels_;
  std::vector<std::unique_ptr<v1::Llm::Stub>> stubs_;
  std::atomic<uint64_t> next_{0};
};

}  // namespace

absl::Status ToAbsl(const grpc::Status& status) {
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
}

std::string StatusCodeName(grpc::StatusCode code) {
  static const char* kNames[] = {
      "OK",        "CANCELLED",      "UNKNOWN",           "INVALID_ARGUMENT",   "DEADLINE_EXCEEDED",
      "NOT_FOUND", "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
      "ABORTED",   "OUT_OF_RANGE",   "UNIMPLEMENTED",     "INTERNAL",           "UNAVAILABLE",
      "DATA_LOSS", "UNAUTHENTICATED"};
  const int c = static_cast<int>(code);
  return c >= 0 && c <= 16 ? kNames[c] : absl::StrCat("CODE_", c);
}

absl::StatusOr<std::unique_ptr<Target>> Target::Connect(const std::string& address, int connections,
                                                        absl::Duration timeout, const std::string& api_key) {
  return GrpcTarget::Connect(address, connections, timeout, api_key);
}

absl::StatusOr<std::unique_ptr<Target>> GrpcTarget::Connect(const std::string& address, int connections,
                                                            absl::Duration timeout, const std::string& api_key) {
  if (connections < 1) return absl::InvalidArgumentError("--connections must be at least 1");
  auto target = std::make_unique<GrpcTarget>();
  target->address_ = address;
  target->api_key_ = api_key;
  const auto deadline = absl::ToChronoTime(absl::Now() + timeout);
  for (int i = 0; i < connections; ++i) {
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(64 << 20);
    args.SetMaxSendMessageSize(64 << 20);
    // A channel of its own (not a shared subchannel): one TCP connection per channel.
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    args.SetInt("llm.loadtest.connection", i);
    auto channel = grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
    if (!channel->WaitForConnected(deadline))
      return absl::UnavailableError(
          absl::StrCat("cannot connect to ", address, " within ", absl::FormatDuration(timeout)));
    target->stubs_.push_back(v1::Llm::NewStub(channel));
    target->channels_.push_back(std::move(channel));
  }
  // UNAVAILABLE while the model loads: ask again until the timeout.
  grpc::Status status;
  for (;;) {
    grpc::ClientContext context;
    context.set_deadline(deadline);
    target->Prepare(context);
    status = target->stubs_[0]->ModelInfo(&context, v1::ModelInfoRequest(), &target->model_info_);
    if (status.error_code() != grpc::StatusCode::UNAVAILABLE || absl::ToChronoTime(absl::Now()) >= deadline)
      break;
    absl::SleepFor(absl::Milliseconds(200));
  }
  if (!status.ok())
    return absl::Status(ToAbsl(status).code(),
                        absl::StrCat("ModelInfo on ", address, ": ", status.error_message()));
  return std::unique_ptr<Target>(std::move(target));
}

v1::Llm::Stub* GrpcTarget::NextStub() {
  return stubs_[next_.fetch_add(1, std::memory_order_relaxed) % stubs_.size()].get();
}

absl::StatusOr<int64_t> GrpcTarget::CountTokens(const std::string& text, bool add_special_tokens) {
  grpc::ClientContext context;
  Prepare(context);
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(30)));
  v1::TokenizeRequest request;
  request.set_text(text);
  request.set_add_special_tokens(add_special_tokens);
  v1::TokenizeResponse response;
  const grpc::Status status = NextStub()->Tokenize(&context, request, &response);
  if (!status.ok()) return ToAbsl(status);
  return response.token_ids_size();
}

}  // namespace llm::loadtest
