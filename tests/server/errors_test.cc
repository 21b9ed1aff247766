// End to end against a real `llm serve` process: every kind of bad input gets its gRPC status and
// a message that says what was wrong, through both Generate and Complete, while a long request
// running beside them is unaffected.
#include <condition_variable>
#include <mutex>
#include <thread>

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/support/byte_buffer.h>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/server/server_process.h"

namespace llm::testing {
namespace {

constexpr int64_t kMaxMessageBytes = 65536;

struct BadInput {
  const char* name;
  std::function<void(v1::GenerateRequest&)> mutate;  // applied to a valid request
  grpc::StatusCode code;
  const char* message;  // a part of the status message
};

std::vector<BadInput> BadInputs() {
  using Req = v1::GenerateRequest;
  const grpc::StatusCode kInvalid = grpc::StatusCode::INVALID_ARGUMENT;
  return {
      {"no prompt", [](Req& r) { r.clear_prompt(); }, kInvalid, "prompt is empty"},
      {"empty token ids", [](Req& r) { r.mutable_token_ids()->clear_ids(); }, kInvalid, "prompt is empty"},
      {"empty text",
       [](Req& r) {
         r.set_text("");
         r.set_add_special_tokens(false);
       },
       kInvalid, "prompt is empty"},
      {"empty text with special tokens", [](Req& r) { r.set_text(""); }, kInvalid, "the prompt is empty: text is"},
      {"over the context",
       [](Req& r) {
         r.mutable_token_ids()->mutable_ids()->Resize(500, 7);
         r.mutable_stopping()->set_max_tokens(100);
       },
       kInvalid, "exceeds the context length 512"},
      {"negative temperature", [](Req& r) { r.mutable_sampling()->set_temperature(-0.5f); }, kInvalid,
       "temperature"},
      {"top_p zero", [](Req& r) { r.mutable_sampling()->set_top_p(0.0f); }, kInvalid,
       "top_p must be in (0, 1]"},
      {"top_p above one", [](Req& r) { r.mutable_sampling()->set_top_p(1.5f); }, kInvalid,
       "top_p must be in (0, 1]"},
      // -1 is "off" (vLLM's spelling); other negative values are refused.
      {"negative top_k", [](Req& r) { r.mutable_sampling()->set_top_k(-2); }, kInvalid, "top_k"},
      {"min_p above one", [](Req& r) { r.mutable_sampling()->set_min_p(2.0f); }, kInvalid, "min_p"},
      {"zero repetition penalty", [](Req& r) { r.mutable_sampling()->set_repetition_penalty(0.0f); },
       kInvalid, "repetition_penalty"},
      {"presence penalty", [](Req& r) { r.mutable_sampling()->set_presence_penalty(3.0f); }, kInvalid,
       "presence_penalty"},
      {"frequency penalty", [](Req& r) { r.mutable_sampling()->set_frequency_penalty(-2.5f); }, kInvalid,
       "frequency_penalty"},
      {"token id past the vocabulary", [](Req& r) { r.mutable_token_ids()->add_ids(384); }, kInvalid,
       "prompt token id 384 is outside the vocabulary"},
      {"negative token id", [](Req& r) { r.mutable_token_ids()->set_ids(0, -1); }, kInvalid,
       "outside the vocabulary"},
      {"invalid UTF-8 prompt", [](Req& r) { r.set_text("ok \xC3\x28 no"); }, kInvalid,
       "the prompt text is not valid UTF-8 (bad byte 0xc3 at offset 3)"},
      {"invalid UTF-8 stop string",
       [](Req& r) { r.mutable_stopping()->add_stop(std::string(1, static_cast<char>(0xFF))); }, kInvalid,
       "stop string 0 is not valid UTF-8"},
      {"empty stop string", [](Req& r) { r.mutable_stopping()->add_stop(""); }, kInvalid,
       "stop strings must not be empty"},
      {"unknown stop token id", [](Req& r) { r.mutable_stopping()->add_stop_token_ids(1000); }, kInvalid,
       "stop token id 1000"},
      {"zero max_tokens", [](Req& r) { r.mutable_stopping()->set_max_tokens(0); }, kInvalid, "max_tokens"},
      {"min_tokens over max_tokens", [](Req& r) { r.mutable_stopping()->set_min_tokens(50); }, kInvalid,
       "min_tokens"},
      {"too many logprobs", [](Req& r) { r.set_top_logprobs(21); }, kInvalid,
       "top logprobs must be in [0, 20]"},
      {"long request id", [](Req& r) { r.set_request_id(std::string(300, 'x')); }, kInvalid, "request_id"},
      {"oversized message", [](Req& r) { r.set_text(std::string(kMaxMessageBytes + 1000, 'a')); },
       grpc::StatusCode::RESOURCE_EXHAUSTED, "larger than max"},
  };
}

class ErrorsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    server_ = ServerProcess::Start(
                  {"--model", TokenizerModelDir(), "--max-message-bytes", std::to_string(kMaxMessageBytes)})
                  .release();
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }
  void SetUp() override {
    ASSERT_NE(server_, nullptr);
    stub_ = server_->NewStub();
  }

  static ServerProcess* server_;
  std::unique_ptr<v1::Llm::Stub> stub_;
};

ServerProcess* ErrorsTest::server_ = nullptr;

TEST_F(ErrorsTest, EveryBadInputHasItsStatusAndOthersAreUnaffected) {
  const v1::GenerateRequest long_request = GreedyIds({9, 8, 7, 6, 5}, 400);
  const CallResult long_alone = Stream(*stub_, long_request);
  ASSERT_TRUE(long_alone.status.ok());
  const double rejected_before = server_->Metric("llm_requests_rejected_total{code=\"INVALID_ARGUMENT\"}");

  CallResult long_beside;
  std::thread beside([&] {
    auto stub = server_->NewStub();
    long_beside = Stream(*stub, long_request);
  });
  int invalid = 0;
  for (const BadInput& bad : BadInputs()) {
    SCOPED_TRACE(bad.name);
    v1::GenerateRequest request = GreedyIds({1, 2, 3}, 8);
    bad.mutate(request);
    for (const CallResult& r : {Stream(*stub_, request), Complete(*stub_, request)}) {
      EXPECT_EQ(r.status.error_code(), bad.code) << r.status.error_message();
      EXPECT_NE(r.status.error_message().find(bad.message), std::string::npos) << r.status.error_message();
      EXPECT_EQ(r.merged.token_ids_size(), 0);
    }
    if (bad.code == grpc::StatusCode::INVALID_ARGUMENT) invalid += 2;
  }
  beside.join();
  ASSERT_TRUE(long_beside.status.ok()) << long_beside.status.error_message();
  EXPECT_EQ(Ids(long_beside.merged), Ids(long_alone.merged));
  EXPECT_EQ(server_->Metric("llm_requests_rejected_total{code=\"INVALID_ARGUMENT\"}") - rejected_before,
            invalid);
  // And the server still serves.
  const CallResult after = Complete(*stub_, GreedyIds({1, 2, 3}, 8));
  EXPECT_TRUE(after.status.ok());
  EXPECT_EQ(after.merged.token_ids_size(), 8);
}

TEST_F(ErrorsTest, TokenizerCallsRejectBadInput) {
  {
    grpc::ClientContext context;
    v1::TokenizeRequest request;
    request.set_text("\xE2\x82");  // a cut-off 3-byte sequence
    v1::TokenizeResponse response;
    const grpc::Status s = stub_->Tokenize(&context, request, &response);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_NE(s.error_message().find("not valid UTF-8"), std::string::npos) << s.error_message();
  }
  {
    grpc::ClientContext context;
    v1::DetokenizeRequest request;
    request.add_token_ids(5);
    request.add_token_ids(4000);
    v1::DetokenizeResponse response;
    const grpc::Status s = stub_->Detokenize(&context, request, &response);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_NE(s.error_message().find("4000"), std::string::npos) << s.error_message();
  }
}

// Bytes that are not a GenerateRequest (as a client with another .proto, or a broken proxy, would
// send): gRPC C++'s callback API parses the request before any handler of ours runs and fails the
// call itself, with UNIMPLEMENTED and no message (its reactor for a failed deserialization; the
// README says so). The call ends with that status at once and the server keeps serving.
TEST_F(ErrorsTest, MalformedRequestBytesFailTheCallAndTheServerServesOn) {
  grpc::GenericStub generic(server_->channel());
  for (const char* method : {"/llm.v1.Llm/Complete", "/llm.v1.Llm/Generate"}) {
    SCOPED_TRACE(method);
    const std::string garbage("\xff\xff\xff\xff\x0f\x12\x05", 7);  // a field number out of range, then a cut string
    grpc::Slice slice(garbage);
    grpc::ByteBuffer request(&slice, 1);
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    grpc::ByteBuffer response;
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    grpc::Status status;
    generic.UnaryCall(&context, method, grpc::StubOptions(), &request, &response, [&](grpc::Status s) {
      std::lock_guard<std::mutex> lock(mu);
      status = std::move(s);
      done = true;
      cv.notify_all();
    });
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return done; });
    std::printf("[ malformed ] %s -> %d '%s'\n", method, status.error_code(), status.error_message().c_str());
    EXPECT_EQ(status.error_code(), grpc::StatusCode::UNIMPLEMENTED) << status.error_message();
  }
  const CallResult after = Complete(*stub_, GreedyIds({1, 2, 3}, 8));
  EXPECT_TRUE(after.status.ok());
}

}  // namespace
}  // namespace llm::testing
