#include "server/loadtest/generate_call.h"

namespace llm::loadtest {

GenerateCall::GenerateCall(v1::Llm::Stub* stub, std::shared_ptr<const v1::GenerateRequest> request,
                           RequestRecord record, SteadyClock::time_point origin, Owner* owner,
                           const std::string& api_key)
    : stub_(stub), request_(std::move(request)), record_(std::move(record)), origin_(origin), owner_(owner) {
  if (!api_key.empty()) context_.AddMetadata("authorization", "Bearer " + api_key);
}

int64_t GenerateCall::Now() const {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(SteadyClock::now() - origin_).count();
}

void GenerateCall::Start(std::chrono::system_clock::time_point deadline) {
  context_.set_deadline(deadline);
  record_.itl_ms.reserve(static_cast<size_t>(std::max<int64_t>(0, record_.expected_output - 1)));
  stub_->async()->Generate(&context_, request_.get(), this);
  StartRead(&response_);
  record_.send_ns = Now();
  StartCall();
}

void GenerateCall::OnReadDone(bool ok) {
  if (!ok) return;  // the stream ended; OnDone follows
  const int64_t now = Now();
  const int n = response_.token_ids_size();
  if (n > 0) {
    if (record_.first_token_ns < 0) {
      record_.first_token_ns = now;
    } else {
      record_.itl_ms.push_back(static_cast<float>((now - record_.last_token_ns) / 1e6));
    }
    record_.itl_ms.insert(record_.itl_ms.end(), n - 1, 0.0f);
    record_.last_token_ns = now;
    record_.output_tokens += n;
  }
  if (response_.finish_reason() != v1::FINISH_REASON_UNSPECIFIED) {
    record_.got_final = true;
    record_.finish_reason = response_.finish_reason();
    record_.usage = response_.usage();
    record_.timings = response_.timings();
  }
  StartRead(&response_);
}

void GenerateCall::OnDone(const grpc::Status& status) {
  record_.end_ns = Now();
  record_.status = status.error_code();
  Owner* owner = owner_;
  RequestRecord record = std::move(record_);
  owner->Forget(this);
  delete this;
  owner->Record(std::move(record));
}

}  // namespace llm::loadtest
