// End to end against real `llm serve` processes, each started with the limits a test needs: a
// full queue refuses with RESOURCE_EXHAUSTED, a small KV cache preempts without changing any
// output, a model without a tokenizer refuses text, SIGTERM drains, bad start-up flags fail.
#include <signal.h>

#include <thread>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/runtime/fixture_reference.h"
#include "tests/server/server_process.h"

namespace llm::testing {
namespace {

std::vector<CallResult> StreamAll(const ServerProcess& server,
                                  const std::vector<v1::GenerateRequest>& requests) {
  std::vector<CallResult> results(requests.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < requests.size(); ++i)
    threads.emplace_back([&, i] {
      auto stub = server.NewStub();
      results[i] = Stream(*stub, requests[i]);
    });
  for (std::thread& t : threads) t.join();
  return results;
}

std::vector<int32_t> Prompt(int length, int salt) {
  std::vector<int32_t> prompt(length);
  for (int j = 0; j < length; ++j) prompt[j] = (salt * 37 + j * 11) % 384;
  return prompt;
}

TEST(LifecycleTest, FullQueueIsResourceExhaustedAndOthersComplete) {
  auto server =
      ServerProcess::Start({"--model", ModelDir("llama-tiny"), "--max-queue", "2", "--max-seqs", "1"});
  ASSERT_NE(server, nullptr);
  std::vector<v1::GenerateRequest> requests;
  for (int i = 0; i < 10; ++i) requests.push_back(GreedyIds(Prompt(8, i), 200));
  const auto results = StreamAll(*server, requests);
  int accepted = 0, refused = 0;
  for (const CallResult& r : results) {
    if (r.status.ok()) {
      ++accepted;
      EXPECT_EQ(r.merged.token_ids_size(), 200);
      EXPECT_EQ(r.merged.finish_reason(), v1::FINISH_REASON_LENGTH);
    } else {
      ++refused;
      EXPECT_EQ(r.status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
      EXPECT_NE(r.status.error_message().find("queue is full (2 waiting)"), std::string::npos)
          << r.status.error_message();
    }
  }
  EXPECT_GE(accepted, 2);  // the queue's two places (a burst may fill them before one runs)
  EXPECT_GE(refused, 1);
  EXPECT_EQ(server->Metric("llm_requests_rejected_total{code=\"RESOURCE_EXHAUSTED\"}"), refused);
  // Once the queue empties, requests are accepted again.
  auto stub = server->NewStub();
  EXPECT_TRUE(Complete(*stub, GreedyIds({1, 2, 3}, 4)).status.ok());
}

TEST(LifecycleTest, ModelWithoutTokenizerServesTokenIdsOnly) {
  auto server = ServerProcess::Start({"--model", ModelDir("qwen2-tiny")});
  ASSERT_NE(server, nullptr);
  auto stub = server->NewStub();
  v1::GenerateRequest text_request;
  text_request.set_text("hello");
  const CallResult text = Stream(*stub, text_request);
  EXPECT_EQ(text.status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(text.status.error_message().find("send token_ids"), std::string::npos)
      << text.status.error_message();
  v1::GenerateRequest stop_request = GreedyIds({1, 2}, 4);
  stop_request.mutable_stopping()->add_stop("x");
  EXPECT_EQ(Complete(*stub, stop_request).status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  grpc::ClientContext context;
  v1::TokenizeRequest tokenize;
  tokenize.set_text("hello");
  v1::TokenizeResponse ids;
  EXPECT_EQ(stub->Tokenize(&context, tokenize, &ids).error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  const auto fixture = LoadFixturePrompts("qwen2-tiny");
  const CallResult ok = Stream(*stub, GreedyIds(fixture[0].prompt, 24));
  ASSERT_TRUE(ok.status.ok()) << ok.status.error_message();
  EXPECT_EQ(Ids(ok.merged), fixture[0].greedy);
  EXPECT_TRUE(ok.merged.text().empty());
  grpc::ClientContext info_context;
  v1::ModelInfoResponse info;
  ASSERT_TRUE(stub->ModelInfo(&info_context, v1::ModelInfoRequest(), &info).ok());
  EXPECT_EQ(info.architecture(), "qwen2");
  EXPECT_FALSE(info.has_tokenizer());
}

// 20 blocks of 16 tokens hold at most 320 tokens; 12 requests of up to 220 tokens each need far
// more at once. Requests are preempted and recomputed, and every output equals its solo run.
TEST(LifecycleTest, PreemptionUnderSmallKvCacheKeepsOutputs) {
  auto server = ServerProcess::Start({"--model", ModelDir("llama-tiny"), "--kv-cache-blocks", "20", "--max-seqs", "12",
                                      "--block-size", "16", "--max-context", "320"});
  ASSERT_NE(server, nullptr);
  std::vector<v1::GenerateRequest> requests;
  for (int i = 0; i < 12; ++i) {
    v1::GenerateRequest r = GreedyIds(Prompt(40 + 5 * i, i), 60 + 5 * i);
    if (i % 3 == 1) {
      r.mutable_sampling()->set_temperature(0.9f);
      r.mutable_sampling()->set_top_k(50);
      r.mutable_sampling()->set_seed(99 + i);
    }
    requests.push_back(r);
  }
  auto stub = server->NewStub();
  std::vector<CallResult> solo;
  for (const auto& r : requests) solo.push_back(Stream(*stub, r));
  ASSERT_EQ(server->Metric("llm_preemptions_total"), 0);
  const auto together = StreamAll(*server, requests);
  int preempted_requests = 0;
  for (size_t i = 0; i < requests.size(); ++i) {
    SCOPED_TRACE(i);
    ASSERT_TRUE(solo[i].status.ok()) << solo[i].status.error_message();
    ASSERT_TRUE(together[i].status.ok()) << together[i].status.error_message();
    EXPECT_EQ(Ids(together[i].merged), Ids(solo[i].merged));
    EXPECT_EQ(together[i].merged.token_ids_size(), requests[i].stopping().max_tokens());
    preempted_requests += together[i].merged.usage().preemptions() > 0;
  }
  EXPECT_GT(preempted_requests, 0);
  EXPECT_GT(server->Metric("llm_preemptions_total"), 0);
  EXPECT_EQ(server->Metric("llm_kv_cache_blocks_used"), 0);
}

// SIGTERM: health turns NOT_SERVING, new requests get UNAVAILABLE, the running and queued ones
// finish with all their tokens, and the process exits 0.
TEST(LifecycleTest, SigtermDrains) {
  auto server =
      ServerProcess::Start({"--model", ModelDir("llama-tiny"), "--max-seqs", "2", "--threads", "1"});
  ASSERT_NE(server, nullptr);
  EXPECT_EQ(server->Health(), grpc::health::v1::HealthCheckResponse::SERVING);
  constexpr int kRequests = 4, kMaxTokens = 500;
  std::vector<v1::GenerateRequest> requests;
  for (int i = 0; i < kRequests; ++i) requests.push_back(GreedyIds(Prompt(8, i), kMaxTokens));
  std::vector<CallResult> results;
  std::thread clients([&] { results = StreamAll(*server, requests); });
  ASSERT_TRUE(WaitFor(
      [&] {
        const auto m = server->Metrics();
        return m.at("llm_requests_running") + m.at("llm_requests_waiting") == kRequests;
      },
      absl::Seconds(10)));
  server->Signal(SIGTERM);
  EXPECT_TRUE(WaitFor([&] { return server->Health() == grpc::health::v1::HealthCheckResponse::NOT_SERVING; },
                      absl::Seconds(5)));
  auto stub = server->NewStub();
  const CallResult refused = Complete(*stub, GreedyIds({1, 2, 3}, 4));
  EXPECT_EQ(refused.status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_NE(refused.status.error_message().find("shutting down"), std::string::npos)
      << refused.status.error_message();
  EXPECT_GT(server->Metric("llm_requests_running"), 0) << "the drain test needs requests still running here";
  clients.join();
  for (const CallResult& r : results) {
    ASSERT_TRUE(r.status.ok()) << r.status.error_message();
    EXPECT_EQ(r.merged.token_ids_size(), kMaxTokens);
  }
  EXPECT_EQ(server->WaitForExit(absl::Seconds(30)), 0) << server->Log();
  EXPECT_NE(server->Log().find("draining"), std::string::npos);
}

TEST(LifecycleTest, BadStartupFailsWithMessage) {
  const std::string llm = std::string(LLM_BINARY_DIR) + "/bin/llm serve --port 0 --metrics-port -1 --http-port -1 ";
  const auto run = [](const std::string& cmd) {
    FILE* p = popen((cmd + " 2>&1").c_str(), "r");
    std::string out;
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
    const int status = pclose(p);
    return std::make_pair(WIFEXITED(status) ? WEXITSTATUS(status) : -1, out);
  };
  auto [code, out] = run(llm + "--model /nonexistent/model");
  EXPECT_EQ(code, 1);
  EXPECT_NE(out.find("'/nonexistent/model' does not exist"), std::string::npos) << out;
  std::tie(code, out) = run(llm + "--model " + ModelDir("llama-tiny") + " --max-message-bytes 10");
  EXPECT_EQ(code, 1);
  EXPECT_NE(out.find("message size limit"), std::string::npos) << out;
  std::tie(code, out) = run(llm + "--bogus");
  EXPECT_EQ(code, 2);
  EXPECT_NE(out.find("unknown flag --bogus"), std::string::npos) << out;
}

}  // namespace
}  // namespace llm::testing
